"""mqctl, the operator CLI (console script ``mqctl = ctl.app:main``).

``app`` composes one module per command group: cluster (clusterList, brokerStatus), ha (haStatus), topic,
group (subscription groups and consumerProgress), message (sendMessage, consumeMessage), chaos (Docker failure
injection) and dev (a local process cluster). ``options`` holds the shared option aliases, ``output`` the one
table-or-JSON printer, ``rpc`` the cluster view over the SDK's AdminClient, ``errors`` the one-line messages.
"""

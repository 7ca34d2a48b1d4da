"""RocketMQ's ACL 2.0 (RIP-68) on the remoting protocol: users, policies, the decision, the request-code table,
and the gate the broker and the nameserver put in front of their processors when it is turned on."""

"""The RocketMQ 5 gRPC endpoint ``apache.rocketmq.v2.MessagingService`` (RocketMQ's proxy in local mode).

Every broker serves it on ``grpcServerPort`` for the official RocketMQ 5 clients (among them the Python
``rocketmq-python-client``). It is a second front door onto the broker's domain services (``BrokerContext``):
the store, topics, groups, offsets. Protos: ``proto/`` (vendored apache/rocketmq-apis), stubs: ``pb/``
(``make proto``).
"""

"""Pop consumption for the v2 endpoint (RocketMQ 5's POP, spec/pop.md): checkpoints and acks kept as commitlog
records in the revive topic, so pop state is durable and replicated like any message."""

"""Controller mode on the broker side (RocketMQ 5's ReplicasManager): roles from the controller, epochs, fencing."""

"""Wire contracts shared by every process: RocketMQ remoting frames, headers, codes and message records, HA frames."""

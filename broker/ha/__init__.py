"""Master/slave replication: HA stream (master.py, connection.py, slave.py), SYNC_MASTER waits
(group_transfer.py), decisions and status records (state.py), and the facade the broker wires (service.py)."""

"""A broker's id in its group (RocketMQ's ``MixAll.MASTER_ID``): the master is 0, its slaves 1 and up.

Route data keys a group's ``brokerAddrs`` by it, so the nameserver, the broker, the SDK, mqctl and the Spark
connector all find a group's master under the same id.
"""

from __future__ import annotations

MASTER_ID = 0

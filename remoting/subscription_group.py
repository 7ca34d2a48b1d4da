"""RocketMQ's SubscriptionGroupConfig: one consumer group's settings, one definition for the broker (which keeps
them in subscriptionGroup.json and serves them to its slaves) and the SDK (GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP).

Its JSON form is the entry of ``subscriptionGroupTable``, RocketMQ's field names::

    {"groupName": "G", "consumeEnable": true, "consumeFromMinEnable": true, "consumeBroadcastEnable": true,
     "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
     "notifyConsumerIdsChangedEnable": true, "consumeMessageOrderly": false}

On the wire (GET_ALL_SUBSCRIPTIONGROUP_CONFIG 201, GET_SUBSCRIPTIONGROUP_CONFIG 352) ``wire_json`` adds the
fields RocketMQ 5's class has and pyrmq does not implement, with RocketMQ's defaults (``ROCKETMQ5_FIXED``), so its
strict readers (rocketmq-rust) decode the answer; ``from_json`` ignores them.

The broker's UPDATE_AND_CREATE_SUBSCRIPTIONGROUP checks a request's body more strictly, naming the bad field
(broker/processors/admin_groups.py); ``from_json`` reads what a broker stored or sent.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from common.conf import conf_key
from remoting.headers import parse_int


# RocketMQ 5's SubscriptionGroupConfig fields that pyrmq keeps at RocketMQ's defaults: retry policy (pyrmq retries
# by messageDelayLevel), group flags, the push consume timeout, attributes. ``subscriptionDataSet`` is null there
# (fastjson omits it), so it is left out too.
ROCKETMQ5_FIXED: dict[str, Any] = {
    "attributes": {},
    "consumeTimeoutMinute": 15,
    "groupRetryPolicy": {"type": "CUSTOMIZED"},
    "groupSysFlag": 0,
}


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    # RocketMQ 5's flag (mqadmin updateSubGroup -o): RocketMQ 5 clients of the group get FIFO pop (settings
    # fifo=true, one batch of a queue in flight at a time); remoting consumers choose orderly themselves
    consume_message_orderly: bool = False

    def to_json(self) -> dict[str, Any]:
        return {conf_key(f): getattr(self, f.name) for f in fields(self)}

    def wire_json(self) -> dict[str, Any]:
        """RocketMQ 5's whole SubscriptionGroupConfig, keys sorted as fastjson writes them."""
        return dict(sorted({**ROCKETMQ5_FIXED, **self.to_json()}.items()))

    @classmethod
    def from_json(cls, obj: dict[str, Any], group_name: str = "") -> SubscriptionGroupConfig:
        """The group's name from ``groupName``, else ``group_name`` (its key in the table); a field missing or
        null takes the default; numbers strictly (``NumberError``), flags by their truth."""
        kwargs: dict[str, Any] = {"group_name": str(obj.get("groupName") or group_name)}
        for f in fields(cls)[1:]:
            value = obj.get(conf_key(f))
            if value is not None:
                kwargs[f.name] = parse_int(value, what=conf_key(f)) if f.type == "int" else bool(value)
        return cls(**kwargs)

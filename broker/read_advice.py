"""Read advice: which broker a consumer should pull a queue from next (RocketMQ PullMessageProcessor, 4.9.8).

Pure functions over the pull's facts, so they can be checked against the table of spec §5.2 ("Net effect"):

| served by | slaveReadEnable | lagging (suggest_pulling_from_slave) | suggestWhichBrokerId            |
|-----------|-----------------|--------------------------------------|---------------------------------|
| master    | false           | any                                  | 0                               |
| master    | true            | no                                   | group.brokerId                  |
| master    | true            | yes                                  | group.whichBrokerWhenConsumeSlowly |
| slave     | false           | any                                  | 0 (messages still returned)     |
| slave     | true            | no                                   | group.brokerId                  |
| slave     | true            | yes                                  | group.whichBrokerWhenConsumeSlowly |

``offset_moved_advice`` is step 6: a slave with ``offsetCheckInSlave=false`` never corrects a consumer's offset
(it may simply lag the master); it answers PULL_RETRY_IMMEDIATELY and sends the consumer to ``group.brokerId``.
"""

from __future__ import annotations

from dataclasses import dataclass

from remoting.codes import ResponseCode


def suggest_broker_id(*, slave_read_enable: bool, suggest_pulling_from_slave: bool, group_broker_id: int,
                      which_broker_when_consume_slowly: int) -> int:
    """suggestWhichBrokerId of a pull response: spec §5.2's step 3 alone, because it assigns the suggestion on both
    of its branches and so overrides whatever steps 1 (the lag flag) and 2 (a slave without slaveReadEnable) set.
    That is also why the serving broker's role does not matter (the table's first column)."""
    if not slave_read_enable:
        return 0
    return which_broker_when_consume_slowly if suggest_pulling_from_slave else group_broker_id


@dataclass(frozen=True, slots=True)
class OffsetMovedAdvice:
    code: ResponseCode  # the response code to send
    suggest_broker_id: int  # overrides suggest_broker_id() when ``override_suggest``
    override_suggest: bool
    correct_offset: bool  # True: next_begin_offset is the store's corrected offset; False: keep the request's


def offset_moved_advice(*, role_is_slave: bool, offset_check_in_slave: bool, group_broker_id: int) -> OffsetMovedAdvice:
    """What to do with a PULL_OFFSET_MOVED result (spec §5.2 step 6)."""
    if not role_is_slave or offset_check_in_slave:
        return OffsetMovedAdvice(ResponseCode.PULL_OFFSET_MOVED, 0, False, True)
    return OffsetMovedAdvice(ResponseCode.PULL_RETRY_IMMEDIATELY, group_broker_id, True, False)

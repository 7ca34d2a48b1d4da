"""The remark of a TOPIC_NOT_EXIST (17) answer, true on either role (issue 22 item 12).

A master that lacks a topic lacks it: create it with updateTopic (or refresh a stale route). A slave creates no
topics; it copies its master's table every ``slaveSynchronizeInterval`` (spec remoting.md §2.5), so a topic created
on the master less than one interval ago, or while the master is down, is missing on the slave only until the next
sync. Telling a slave's reader to run updateTopic sends them to a command the slave refuses; the slave says what is
true instead: it has not synced the topic yet, so retry shortly or read from the master once it is back.
"""

from __future__ import annotations

from broker.context import BrokerContext


def topic_not_exist(ctx: BrokerContext, topic: str, master_advice: str) -> str:
    """``topic[T] not exist on broker B`` (RocketMQ's opening) and what to do: ``master_advice`` on a master, the
    slave's sync state on a slave."""
    if not ctx.is_slave:
        return f"topic[{topic}] not exist on broker {ctx.broker_name}; {master_advice}"
    interval_s = ctx.settings.broker.slave_synchronize_interval / 1000
    master = f" ({ctx.master.broker})" if ctx.master.broker else ""
    return (
        f"topic[{topic}] not exist on slave broker {ctx.broker_name} id {ctx.broker_id}: this slave has not synced"
        f" the topic from its master yet (it copies the master's topics every {interval_s:g} s); retry in a few"
        f" seconds, or wait for the master{master} to be back and read from it"
    )

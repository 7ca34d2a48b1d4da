"""route_cache.default_route_data: RocketMQ's isDefault route, TBW102's with every group at min(n, readQueueNums)."""

from __future__ import annotations

from client.route_cache import default_route_data, route_from_data
from remoting.topic_route import read_topic_route


def test_each_group_gets_min_of_default_topic_queue_nums_and_its_read_queues_for_both_sides():
    template = {
        "queueDatas": [
            {"brokerName": "a", "readQueueNums": 8, "writeQueueNums": 8, "perm": 7, "topicSysFlag": 0},
            {"brokerName": "b", "readQueueNums": 2, "writeQueueNums": 6, "perm": 7, "topicSysFlag": 0},
        ],
        "brokerDatas": [{"brokerName": "a", "brokerAddrs": {0: "h:1"}}, {"brokerName": "b", "brokerAddrs": {0: "h:2"}}],
    }
    tbw102 = read_topic_route(template)
    data = default_route_data(tbw102, 4)
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in data.queue_datas] == [
        ("a", 4, 4, 7), ("b", 2, 2, 7)
    ]
    assert data.broker_datas == tbw102.broker_datas
    assert tbw102.queue_datas[0].read_queue_nums == 8  # the template is not changed
    route = route_from_data("NEW", data)
    assert [(mq.broker_name, mq.queue_id) for mq in route.publish_queues] == [
        ("a", 0), ("a", 1), ("a", 2), ("a", 3), ("b", 0), ("b", 1)
    ]

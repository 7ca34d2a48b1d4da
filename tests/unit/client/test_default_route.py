"""route_cache.default_route_data: RocketMQ's isDefault route, TBW102's with every group at min(n, readQueueNums)."""

from __future__ import annotations

from client.route_cache import default_route_data, route_from_data


def test_each_group_gets_min_of_default_topic_queue_nums_and_its_read_queues_for_both_sides():
    template = {
        "queueDatas": [
            {"brokerName": "a", "readQueueNums": 8, "writeQueueNums": 8, "perm": 7, "topicSysFlag": 0},
            {"brokerName": "b", "readQueueNums": 2, "writeQueueNums": 6, "perm": 7, "topicSysFlag": 0},
        ],
        "brokerDatas": [{"brokerName": "a", "brokerAddrs": {0: "h:1"}}, {"brokerName": "b", "brokerAddrs": {0: "h:2"}}],
    }
    data = default_route_data(template, 4)
    assert [(q["brokerName"], q["readQueueNums"], q["writeQueueNums"], q["perm"]) for q in data["queueDatas"]] == [
        ("a", 4, 4, 7), ("b", 2, 2, 7)
    ]
    assert data["brokerDatas"] == template["brokerDatas"]
    assert template["queueDatas"][0]["readQueueNums"] == 8  # the template is not changed
    route = route_from_data("NEW", data)
    assert [(mq.broker_name, mq.queue_id) for mq in route.publish_queues] == [
        ("a", 0), ("a", 1), ("a", 2), ("a", 3), ("b", 0), ("b", 1)
    ]

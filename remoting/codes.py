"""RocketMQ's request and response codes (spec remoting.md §1.6, §2) and what each response means to a caller.

Every response carries ``code`` and ``remark`` in-band, with RocketMQ's numbering, so RocketMQ's clients read
pyrmq's answers unchanged. ``SEND_OK_CODES`` are the four codes that mean "stored on the master" (RocketMQ counts all four as
sent; FLUSH_DISK_TIMEOUT / FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE say the promise is weaker than asked).
"""

from __future__ import annotations

import enum


class ResponseCode(enum.IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    INVALID_PARAMETER = 29  # a request field that can never be valid (RocketMQ 5's number)
    CONSUMER_NOT_ONLINE = 206
    # controller mode (RocketMQ 5's ResponseCode 2000-2016)
    CONTROLLER_FENCED_MASTER_EPOCH = 2000
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001
    CONTROLLER_INVALID_MASTER = 2002
    CONTROLLER_INVALID_REPLICAS = 2003
    CONTROLLER_MASTER_NOT_AVAILABLE = 2004
    CONTROLLER_INVALID_REQUEST = 2005
    CONTROLLER_BROKER_NOT_ALIVE = 2006
    CONTROLLER_NOT_LEADER = 2007
    CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008
    CONTROLLER_INVALID_CLEAN_BROKER_METADATA = 2009
    CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010
    CONTROLLER_MASTER_STILL_EXIST = 2011
    CONTROLLER_ELECT_MASTER_FAILED = 2012
    CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013
    CONTROLLER_BROKER_ID_INVALID = 2014
    CONTROLLER_JRAFT_INTERNAL_ERROR = 2015
    CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS = 2016


MEANING: dict[ResponseCode, str] = {
    ResponseCode.SUCCESS: "done",
    ResponseCode.SYSTEM_ERROR: "the server failed to handle the request",
    ResponseCode.SYSTEM_BUSY: "the server is overloaded; retry later",
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: "this server does not support the request",
    ResponseCode.FLUSH_DISK_TIMEOUT: "stored on the master but not flushed to its disk in time",
    ResponseCode.SLAVE_NOT_AVAILABLE: "stored on the master; no slave in sync to replicate to",
    ResponseCode.FLUSH_SLAVE_TIMEOUT: "stored on the master; the slave did not acknowledge in time",
    ResponseCode.MESSAGE_ILLEGAL: "the message breaks a limit (size, topic name, properties)",
    ResponseCode.SERVICE_NOT_AVAILABLE: "the broker cannot take writes now (slave, disk full, stopping)",
    ResponseCode.VERSION_NOT_SUPPORTED: "the client version is not supported",
    ResponseCode.NO_PERMISSION: "the topic, group or broker does not allow this operation",
    ResponseCode.TOPIC_NOT_EXIST: "the topic does not exist",
    ResponseCode.TOPIC_EXIST_ALREADY: "the topic exists already",
    ResponseCode.PULL_NOT_FOUND: "no new message at this offset",
    ResponseCode.PULL_RETRY_IMMEDIATELY: "nothing matched here; pull again (maybe from the suggested broker)",
    ResponseCode.PULL_OFFSET_MOVED: "the offset is out of the queue's range; use next_begin_offset",
    ResponseCode.QUERY_NOT_FOUND: "nothing stored for this query",
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: "the subscription expression cannot be parsed",
    ResponseCode.SUBSCRIPTION_NOT_EXIST: "the consumer is not subscribed to this topic",
    ResponseCode.SUBSCRIPTION_NOT_LATEST: "the subscription changed; resend the heartbeat",
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: "the consumer group does not exist on this broker",
    ResponseCode.FILTER_DATA_NOT_EXIST: "the filter data does not exist",
    ResponseCode.FILTER_DATA_NOT_LATEST: "the filter data changed; resend the heartbeat",
    ResponseCode.INVALID_PARAMETER: "a request field is invalid",
    ResponseCode.CONSUMER_NOT_ONLINE: "no consumer of this group is connected",
    ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH: "the request's masterEpoch is stale: a newer master was elected",
    ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH: "the request's syncStateSetEpoch is stale",
    ResponseCode.CONTROLLER_INVALID_MASTER: "the sender is not the group's current master",
    ResponseCode.CONTROLLER_INVALID_REPLICAS: "the proposed SyncStateSet names a broker that cannot be in it",
    ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE: "no eligible broker: the group has no master",
    ResponseCode.CONTROLLER_INVALID_REQUEST: "the controller request is invalid",
    ResponseCode.CONTROLLER_BROKER_NOT_ALIVE: "the broker has not heartbeated within its timeout",
    ResponseCode.CONTROLLER_NOT_LEADER: "this controller is not the active one; ask the one named in the remark",
    ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST: "the controller knows no such broker group or broker",
    ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA: "the broker metadata cannot be cleaned",
    ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED: "apply for a brokerId and register first",
    ResponseCode.CONTROLLER_MASTER_STILL_EXIST: "the group's master is alive and stays master",
    ResponseCode.CONTROLLER_ELECT_MASTER_FAILED: "the election found no eligible broker",
    ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED: "the SyncStateSet change was not applied",
    ResponseCode.CONTROLLER_BROKER_ID_INVALID: "the brokerId is taken by another broker or out of range",
    ResponseCode.CONTROLLER_JRAFT_INTERNAL_ERROR: "the controller's store failed",
    ResponseCode.CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS: "the controller has no heartbeat of this broker",
}

# Codes under which a send was stored on the master (RocketMQ's "sendOK" set).
SEND_OK_CODES = frozenset(
    {
        ResponseCode.SUCCESS,
        ResponseCode.FLUSH_DISK_TIMEOUT,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        ResponseCode.SLAVE_NOT_AVAILABLE,
    }
)


def describe(code: int) -> str:
    try:
        rc = ResponseCode(code)
    except ValueError:
        return f"code {code}"
    return f"{rc.name} ({MEANING[rc]})"


class RequestCode(enum.IntEnum):
    """RocketMQ's RequestCode numbers that pyrmq serves or sends (spec §2)."""

    # broker: producer
    SEND_MESSAGE = 10
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    # broker: consumer
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    CHECK_CLIENT_CONFIG = 46
    # nameserver
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    # broker: admin
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    GET_KVLIST_BY_NAMESPACE = 219
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_DATA_VERSION = 322
    ADD_WRITE_PERM_OF_BROKER = 327
    # RocketMQ 5: one subscription group's config (header ``group``), what its mqadmin and rocketmq-rust ask
    GET_SUBSCRIPTIONGROUP_CONFIG = 352
    # RocketMQ 5's HA runtime info (HARuntimeInfo), served by pyrmq's 4.x-style brokers too
    GET_BROKER_HA_STATUS = 907
    # controller mode (RocketMQ 5): broker -> controller, admin -> controller, controller -> broker
    BROKER_HEARTBEAT = 904
    CONTROLLER_ALTER_SYNC_STATE_SET = 1001
    CONTROLLER_ELECT_MASTER = 1002
    CONTROLLER_REGISTER_BROKER = 1003
    CONTROLLER_GET_REPLICA_INFO = 1004
    CONTROLLER_GET_METADATA_INFO = 1005
    CONTROLLER_GET_SYNC_STATE_DATA = 1006
    GET_BROKER_EPOCH_CACHE = 1007
    NOTIFY_BROKER_ROLE_CHANGED = 1008
    CONTROLLER_GET_NEXT_BROKER_ID = 1012
    CONTROLLER_APPLY_BROKER_ID = 1013
    # pyrmq's, RocketMQ's framing: a master tells a subscribed slave, ONEWAY on the slave's own sync connection, that
    # its metadata changed (broker/slave_notify.py); no RocketMQ code does this, and a RocketMQ slave drops it
    NOTIFY_METADATA_CHANGED = 9101
    # ACL 2.0 management (RocketMQ 5.3)
    AUTH_CREATE_USER = 3001
    AUTH_UPDATE_USER = 3002
    AUTH_DELETE_USER = 3003
    AUTH_GET_USER = 3004
    AUTH_LIST_USER = 3005
    AUTH_CREATE_ACL = 3006
    AUTH_UPDATE_ACL = 3007
    AUTH_DELETE_ACL = 3008
    AUTH_GET_ACL = 3009
    AUTH_LIST_ACL = 3010


class LanguageCode(enum.IntEnum):
    """``language`` of a command: the name travels in JSON headers, the number in binary ones (spec §6.1)."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


# MQVersion ordinal pyrmq stamps on every command: V4_9_7. Clients gate features on >= 401 (standard JSON routes).
CURRENT_VERSION = 407

"""ACL 2.0 management over remoting (RocketMQ 5.3's AUTH_* codes 3001-3010 and bodies), for mqctl and tests.

Each function takes an ``AdminClient`` (sign it with a Super user's credentials when the broker checks them) and a
broker address; a refusal raises ``BrokerError`` with the broker's remark. Passwords are sent, never returned.
"""

from __future__ import annotations

from typing import Any

import orjson

from remoting.codes import RequestCode


def user_info(username: str, password: str | None = None, user_type: str | None = None,
              user_status: str | None = None) -> dict[str, str]:
    info = {"username": username}
    for key, value in (("password", password), ("userType", user_type), ("userStatus", user_status)):
        if value:
            info[key] = value
    return info


def acl_info(subject: str, resources: list[str], actions: list[str], decision: str = "Allow",
             source_ips: list[str] | None = None) -> dict[str, Any]:
    """RocketMQ's AclInfo: one entry per resource, each with the same actions, decision and source IPs."""
    entries = [{"resource": r, "actions": actions, "sourceIps": source_ips or [], "decision": decision}
               for r in resources]
    return {"subject": subject, "policies": [{"policyType": "Custom", "entries": entries}]}


def _json(response) -> Any:
    return orjson.loads(response.body_bytes()) if response.body_len() else None


async def create_user(admin, addr: str, info: dict[str, str]) -> None:
    await admin.remoting.call(addr, RequestCode.AUTH_CREATE_USER, {"username": info["username"]},
                              orjson.dumps(info), timeout_s=admin.timeout_s)


async def update_user(admin, addr: str, info: dict[str, str]) -> None:
    await admin.remoting.call(addr, RequestCode.AUTH_UPDATE_USER, {"username": info["username"]},
                              orjson.dumps(info), timeout_s=admin.timeout_s)


async def delete_user(admin, addr: str, username: str) -> None:
    await admin.remoting.call(addr, RequestCode.AUTH_DELETE_USER, {"username": username}, timeout_s=admin.timeout_s)


async def get_user(admin, addr: str, username: str) -> dict[str, str]:
    return _json(await admin.remoting.call(addr, RequestCode.AUTH_GET_USER, {"username": username},
                                           timeout_s=admin.timeout_s))


async def list_users(admin, addr: str, filter: str = "") -> list[dict[str, str]]:
    ext = {"filter": filter} if filter else {}
    return _json(await admin.remoting.call(addr, RequestCode.AUTH_LIST_USER, ext, timeout_s=admin.timeout_s)) or []


async def create_acl(admin, addr: str, info: dict[str, Any]) -> None:
    await admin.remoting.call(addr, RequestCode.AUTH_CREATE_ACL, {"subject": info["subject"]}, orjson.dumps(info),
                              timeout_s=admin.timeout_s)


async def update_acl(admin, addr: str, info: dict[str, Any]) -> None:
    await admin.remoting.call(addr, RequestCode.AUTH_UPDATE_ACL, {"subject": info["subject"]}, orjson.dumps(info),
                              timeout_s=admin.timeout_s)


async def delete_acl(admin, addr: str, subject: str, resource: str = "") -> None:
    ext = {"subject": subject}
    if resource:
        ext["resource"] = resource
    await admin.remoting.call(addr, RequestCode.AUTH_DELETE_ACL, ext, timeout_s=admin.timeout_s)


async def get_acl(admin, addr: str, subject: str) -> dict[str, Any]:
    return _json(await admin.remoting.call(addr, RequestCode.AUTH_GET_ACL, {"subject": subject},
                                           timeout_s=admin.timeout_s))


async def list_acls(admin, addr: str, subject_filter: str = "", resource_filter: str = "") -> list[dict[str, Any]]:
    ext = {k: v for k, v in (("subjectFilter", subject_filter), ("resourceFilter", resource_filter)) if v}
    return _json(await admin.remoting.call(addr, RequestCode.AUTH_LIST_ACL, ext, timeout_s=admin.timeout_s)) or []

"""AUTH_CREATE/UPDATE/DELETE/GET/LIST_USER (3001-3005) and AUTH_*_ACL (3006-3010), RocketMQ 5.3's headers
(``username``, ``filter``; ``subject``, ``policyType``, ``resource``, ``subjectFilter``, ``resourceFilter``) and
bodies (UserInfo, AclInfo JSON). A user's password never leaves the broker: GET and LIST answer without it,
except LIST with pyrmq's ``withPassword=true`` asked with the inner credentials (a slave copying its master's users,
``broker.slave_sync``).
A create of an ACL that exists, and an update, merge entries by resource (a new entry replaces the one for the
same resource), as RocketMQ's ``updateAcl`` does; a create of a user that exists exactly as given succeeds (a slave
took it from its master's push before a tool wrote it there too). A delete of a user that is not there succeeds too,
as RocketMQ's (its store deletes a key): ``mqadmin deleteUser -c`` writes to every master and slave, and a slave has
dropped the user already when its master's push came first. Bad input is INVALID_PARAMETER with what to fix; nothing
changes.
"""

from __future__ import annotations

import dataclasses
import hmac

import orjson

from broker.auth.model import Acl, AuthError, Resource, User, check_name
from broker.auth.store import AuthStore
from remoting.acl_signature import ACCESS_KEY
from remoting.codes import RequestCode, ResponseCode
from remoting.frame_codec import RemotingCommand, response_to


def _body(cmd: RemotingCommand) -> object:
    try:
        return orjson.loads(cmd.body_bytes())
    except orjson.JSONDecodeError:
        raise AuthError("the body is not JSON (RocketMQ's UserInfo or AclInfo)") from None


def _ok(cmd: RemotingCommand, body: object = None) -> RemotingCommand:
    return response_to(cmd, ResponseCode.SUCCESS, body=orjson.dumps(body) if body is not None else b"")


def _user_from_request(cmd: RemotingCommand) -> User:
    data = _body(cmd)
    if isinstance(data, dict) and not data.get("username"):
        data = {**data, "username": (cmd.ext or {}).get("username")}
    return User.from_json(data)


def _subject_name(subject: object) -> str:
    if not isinstance(subject, str) or not subject.startswith("User:"):
        raise AuthError("subject is User:<username>")
    name = subject[len("User:"):]
    check_name(name, "username")
    return name


def _same_user(a: User, b: User) -> bool:
    return (a.user_type, a.status) == (b.user_type, b.status) and hmac.compare_digest(
        a.password.encode(), b.password.encode())


WITH_PASSWORD = "withPassword"  # pyrmq's AUTH_LIST_USER flag: the slave's sync needs the passwords to check signatures


def register(server, store: AuthStore, gate=None) -> None:
    """``gate`` (broker.auth.gate.AuthGate) says who the caller proved to be: only the brokers' inner credentials,
    checked by authentication, may list users with their passwords."""

    async def handle(cmd: RemotingCommand, mutate) -> RemotingCommand:
        try:
            return await store.change(lambda: mutate(cmd))
        except AuthError as exc:
            return response_to(cmd, ResponseCode.INVALID_PARAMETER, str(exc))
        except OSError as exc:
            return response_to(cmd, ResponseCode.SYSTEM_ERROR, f"cannot write {store.path} ({exc.strerror or exc}); "
                                                               "nothing changed: free the disk or fix the permissions")

    def _create_user(cmd):
        user = _user_from_request(cmd)
        old = store.users.get(user.username)
        if old is not None:
            if _same_user(old, user):
                return _ok(cmd)  # as given already: a slave that took it from its master's push, a retried create
            raise AuthError(f"user {user.username!r} exists; use updateUser")
        store.users[user.username] = user
        return _ok(cmd)

    def _update_user(cmd):
        data = _body(cmd)
        if not isinstance(data, dict):
            raise AuthError("the body is a UserInfo JSON object")
        name = data.get("username") or (cmd.ext or {}).get("username")
        old = store.users.get(name)
        if old is None:
            raise AuthError(f"no user {str(name)[:64]!r}; use createUser")
        merged = {**old.to_json(with_password=True), **{k: v for k, v in data.items() if v not in (None, "")}}
        store.users[old.username] = User.from_json({**merged, "username": old.username})
        return _ok(cmd)

    def _delete_user(cmd):
        name = (cmd.ext or {}).get("username")
        if not name:
            raise AuthError("username: must not be empty")
        store.users.pop(name, None)  # gone already is done: see the module's docstring
        return _ok(cmd)

    def _get_user(cmd):
        user = store.users.get((cmd.ext or {}).get("username"))
        if user is None:
            return response_to(cmd, ResponseCode.INVALID_PARAMETER,
                               f"no user {str((cmd.ext or {}).get('username'))[:64]!r}")
        return _ok(cmd, user.to_json(with_password=False))

    def _list_users(cmd):
        ext = cmd.ext or {}
        if ext.get(WITH_PASSWORD) == "true":
            if gate is None or not gate.authentication or not gate.is_inner(ext.get(ACCESS_KEY)):
                return response_to(cmd, ResponseCode.NO_PERMISSION,
                                   f"{WITH_PASSWORD} is for the brokers' own innerClientAuthenticationCredentials "
                                   "on a broker with authenticationEnabled (a slave's metadata sync)")
            return _ok(cmd, [u.to_json(with_password=True) for u in store.users.values()])
        needle = ext.get("filter") or ""
        return _ok(cmd, [u.to_json(with_password=False) for u in store.users.values() if needle in u.username])

    def _merge_acl(cmd, *, must_exist: bool):
        acl = Acl.from_json(_body(cmd))
        old = store.acls.get(acl.username)
        if old is None and must_exist:
            raise AuthError(f"no ACL for {acl.subject}; use createAcl")
        new_resources = {e.resource for e in acl.entries}
        kept = tuple(e for e in (old.entries if old else ()) if e.resource not in new_resources)
        store.acls[acl.username] = dataclasses.replace(acl, entries=kept + acl.entries)
        return _ok(cmd)

    def _delete_acl(cmd):
        ext = cmd.ext or {}
        name = _subject_name(ext.get("subject"))
        old = store.acls.get(name)
        if old is None:
            raise AuthError(f"no ACL for User:{name}")
        if ext.get("resource"):
            resource = Resource.parse(ext["resource"])
            store.acls[name] = dataclasses.replace(old, entries=tuple(e for e in old.entries
                                                                       if e.resource != resource))
        else:
            del store.acls[name]
        return _ok(cmd)

    def _get_acl(cmd):
        try:
            name = _subject_name((cmd.ext or {}).get("subject"))
        except AuthError as exc:
            return response_to(cmd, ResponseCode.INVALID_PARAMETER, str(exc))
        acl = store.acls.get(name)
        if acl is None:
            return response_to(cmd, ResponseCode.INVALID_PARAMETER, f"no ACL for User:{name}")
        return _ok(cmd, acl.to_json())

    def _list_acls(cmd):
        ext = cmd.ext or {}
        subject_filter, resource_filter = ext.get("subjectFilter") or "", ext.get("resourceFilter") or ""
        out = []
        for acl in store.acls.values():
            if subject_filter not in acl.subject:
                continue
            if resource_filter and not any(resource_filter in str(e.resource) for e in acl.entries):
                continue
            out.append(acl.to_json())
        return _ok(cmd, out)

    def changing(mutate):
        return lambda conn, cmd: handle(cmd, mutate)

    def reading(read):
        return lambda conn, cmd: read(cmd)

    server.register(RequestCode.AUTH_CREATE_USER, changing(_create_user))
    server.register(RequestCode.AUTH_UPDATE_USER, changing(_update_user))
    server.register(RequestCode.AUTH_DELETE_USER, changing(_delete_user))
    server.register(RequestCode.AUTH_GET_USER, reading(_get_user))
    server.register(RequestCode.AUTH_LIST_USER, reading(_list_users))
    server.register(RequestCode.AUTH_CREATE_ACL, changing(lambda cmd: _merge_acl(cmd, must_exist=False)))
    server.register(RequestCode.AUTH_UPDATE_ACL, changing(lambda cmd: _merge_acl(cmd, must_exist=True)))
    server.register(RequestCode.AUTH_DELETE_ACL, changing(_delete_acl))
    server.register(RequestCode.AUTH_GET_ACL, reading(_get_acl))
    server.register(RequestCode.AUTH_LIST_ACL, reading(_list_acls))


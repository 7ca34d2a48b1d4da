"""ACL 2.0 commands with mqadmin's names and letters: createUser updateUser deleteUser getUser listUser (-u user,
-p password, -t userType Super|Normal, -s userStatus enable|disable, -f filter) and createAcl updateAcl deleteAcl
getAcl listAcl (-s subject User:<name>, -r resources, -a actions, -d decision Allow|Deny, -i source IPs, comma
separated). Each goes to one broker (-b), or to the nameservers and the brokers of a cluster (-c): a change to
every master (each slave takes its master's users and ACLs, pushed at once by NOTIFY_METADATA_CHANGED, so writing
to it too would race with that copy), a read to every broker, slaves too. Requests are signed with
``MQCTL_ACCESS_KEY`` / ``MQCTL_SECRET_KEY`` (or --accessKey / --secretKey); a server that checks them wants a Super user. No output ever holds a password.
"""

from __future__ import annotations

from typing import Annotated

import typer

from ctl.options import DEFAULT_NAMESRV, BrokerAddrOpt, ClusterOpt, JsonOpt, NamesrvOpt, one_target
from ctl.output import Column, Output

app = typer.Typer()

AccessKeyOpt = Annotated[str | None, typer.Option("--accessKey", envvar="MQCTL_ACCESS_KEY",
                                                  help="Sign with this user (default: $MQCTL_ACCESS_KEY).")]
SecretKeyOpt = Annotated[str | None, typer.Option("--secretKey", envvar="MQCTL_SECRET_KEY", show_default=False,
                                                  help="Its password (prefer $MQCTL_SECRET_KEY: argv shows in ps).")]
UserOpt = Annotated[str, typer.Option("-u", "--username", help="User name (its access key).")]
SubjectOpt = Annotated[str, typer.Option("-s", "--subject", help="Subject, User:<name>.")]
USER_COLUMNS = [Column("Username", "username"), Column("UserType", "userType"), Column("UserStatus", "userStatus")]
ACL_COLUMNS = [Column("Subject", "subject"), Column("Resource", "resource"), Column("Actions", "actions"),
               Column("SourceIps", "sourceIps"), Column("Decision", "decision")]


def _split(text: str | None) -> list[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


def _each_broker(namesrv, broker_addr, cluster_name, access_key, secret_key, call, *, change: bool = False) -> list:
    """Run ``call(admin, addr)`` on each target broker; the answers in order. A ``change`` with -c goes to the
    masters only: their slaves copy it from them."""
    one_target(broker_addr, cluster_name)
    from client.errors import BrokerError
    from ctl.rpc import Cluster
    from remoting.codes import ResponseCode

    with Cluster(namesrv) as cluster:
        if access_key and secret_key:
            cluster.client.remoting.use_credentials(access_key, secret_key)
        # -c: every broker of the cluster (a change: every master) and the nameservers of -n
        results = [(addr, cluster.run(call(cluster.client, addr)))
                   for addr in cluster.target_addrs(broker_addr, cluster_name, masters_only=change)]
        for addr in cluster.namesrv_addrs if cluster_name else ():
            try:  # a nameserver checks route queries with its own copy, when it checks at all
                results.append((addr, cluster.run(call(cluster.client, addr))))
            except BrokerError as exc:
                if exc.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:  # ACL off there: nothing to keep
                    raise
        return results


def _done(json: bool, what: str, results: list) -> None:
    out = Output(json)
    for addr, _ in results:
        out.progress(f"{what} on [{addr}] success.")
    out.show({"servers": [addr for addr, _ in results]}, [])


@app.command("createUser")
def create_user(username: UserOpt,
                password: Annotated[str, typer.Option("-p", "--password", help="Its password (secret key).")],
                user_type: Annotated[str, typer.Option("-t", "--userType", help="Super or Normal.")] = "Normal",
                namesrv: NamesrvOpt = DEFAULT_NAMESRV, broker_addr: BrokerAddrOpt = None,
                cluster_name: ClusterOpt = None, access_key: AccessKeyOpt = None, secret_key: SecretKeyOpt = None,
                json: JsonOpt = False):
    """Create an ACL 2.0 user on one broker (-b) or every master of a cluster (-c)."""
    from client import acl_admin

    info = acl_admin.user_info(username, password, user_type)
    _done(json, f"create user [{username}]", _each_broker(
        namesrv, broker_addr, cluster_name, access_key, secret_key,
        lambda admin, addr: acl_admin.create_user(admin, addr, info), change=True))


@app.command("updateUser")
def update_user(username: UserOpt,
                password: Annotated[str | None, typer.Option("-p", "--password", help="A new password.")] = None,
                user_type: Annotated[str | None, typer.Option("-t", "--userType", help="Super or Normal.")] = None,
                user_status: Annotated[str | None, typer.Option("-s", "--userStatus",
                                                                help="enable or disable.")] = None,
                namesrv: NamesrvOpt = DEFAULT_NAMESRV, broker_addr: BrokerAddrOpt = None,
                cluster_name: ClusterOpt = None, access_key: AccessKeyOpt = None, secret_key: SecretKeyOpt = None,
                json: JsonOpt = False):
    """Change a user's password, type or status."""
    from client import acl_admin

    info = acl_admin.user_info(username, password, user_type, user_status)
    _done(json, f"update user [{username}]", _each_broker(
        namesrv, broker_addr, cluster_name, access_key, secret_key,
        lambda admin, addr: acl_admin.update_user(admin, addr, info), change=True))


@app.command("deleteUser")
def delete_user(username: UserOpt, namesrv: NamesrvOpt = DEFAULT_NAMESRV, broker_addr: BrokerAddrOpt = None,
                cluster_name: ClusterOpt = None, access_key: AccessKeyOpt = None, secret_key: SecretKeyOpt = None,
                json: JsonOpt = False):
    """Delete a user."""
    from client import acl_admin

    _done(json, f"delete user [{username}]", _each_broker(
        namesrv, broker_addr, cluster_name, access_key, secret_key,
        lambda admin, addr: acl_admin.delete_user(admin, addr, username), change=True))


def _show_users(json: bool, results: list) -> None:
    rows = []
    for addr, users in results:
        rows += [{"broker": addr, **{k: v for k, v in u.items() if k != "password"}} for u in users]
    Output(json).table([Column("Server", "broker"), *USER_COLUMNS], rows)


@app.command("getUser")
def get_user(username: UserOpt, namesrv: NamesrvOpt = DEFAULT_NAMESRV, broker_addr: BrokerAddrOpt = None,
             cluster_name: ClusterOpt = None, access_key: AccessKeyOpt = None, secret_key: SecretKeyOpt = None,
             json: JsonOpt = False):
    """Show a user (never its password)."""
    from client import acl_admin

    async def one(admin, addr):
        return [await acl_admin.get_user(admin, addr, username)]

    _show_users(json, _each_broker(namesrv, broker_addr, cluster_name, access_key, secret_key, one))


@app.command("listUser")
def list_user(filter: Annotated[str, typer.Option("-f", "--filter", help="Names containing this.")] = "",
              namesrv: NamesrvOpt = DEFAULT_NAMESRV, broker_addr: BrokerAddrOpt = None,
              cluster_name: ClusterOpt = None, access_key: AccessKeyOpt = None, secret_key: SecretKeyOpt = None,
              json: JsonOpt = False):
    """List users (never their passwords)."""
    from client import acl_admin

    _show_users(json, _each_broker(namesrv, broker_addr, cluster_name, access_key, secret_key,
                                   lambda admin, addr: acl_admin.list_users(admin, addr, filter)))


ResourcesOpt = Annotated[str, typer.Option("-r", "--resources",
                                           help="Comma-separated: Topic:t, Topic:prefix*, Group:g, Cluster, *.")]
ActionsOpt = Annotated[str, typer.Option("-a", "--actions",
                                         help="Comma-separated: Pub, Sub, Create, Update, Delete, Get, List, All.")]
DecisionOpt = Annotated[str, typer.Option("-d", "--decision", help="Allow or Deny.")]
SourceIpOpt = Annotated[str, typer.Option("-i", "--sourceIp", help="Comma-separated addresses or CIDR ranges.")]


def _acl_command(name: str, verb: str):
    @app.command(name)
    def command(subject: SubjectOpt, resources: ResourcesOpt, actions: ActionsOpt, decision: DecisionOpt = "Allow",
                source_ip: SourceIpOpt = "", namesrv: NamesrvOpt = DEFAULT_NAMESRV, broker_addr: BrokerAddrOpt = None,
                cluster_name: ClusterOpt = None, access_key: AccessKeyOpt = None, secret_key: SecretKeyOpt = None,
                json: JsonOpt = False):
        from client import acl_admin

        info = acl_admin.acl_info(subject, _split(resources), _split(actions), decision, _split(source_ip))
        call = getattr(acl_admin, verb)
        _done(json, f"{name} [{subject}]", _each_broker(namesrv, broker_addr, cluster_name, access_key, secret_key,
                                                        lambda admin, addr: call(admin, addr, info), change=True))

    command.__doc__ = f"{name}: a policy entry per resource, with these actions, decision and source IPs."
    return command


_acl_command("createAcl", "create_acl")
_acl_command("updateAcl", "update_acl")


@app.command("deleteAcl")
def delete_acl(subject: SubjectOpt,
               resource: Annotated[str, typer.Option("-r", "--resources", help="Only this resource's entry.")] = "",
               namesrv: NamesrvOpt = DEFAULT_NAMESRV, broker_addr: BrokerAddrOpt = None,
               cluster_name: ClusterOpt = None, access_key: AccessKeyOpt = None, secret_key: SecretKeyOpt = None,
               json: JsonOpt = False):
    """Delete a subject's ACL, or one resource's entry of it (-r)."""
    from client import acl_admin

    _done(json, f"delete acl [{subject}]", _each_broker(
        namesrv, broker_addr, cluster_name, access_key, secret_key,
        lambda admin, addr: acl_admin.delete_acl(admin, addr, subject, resource), change=True))


def _show_acls(json: bool, results: list) -> None:
    rows = []
    for addr, acls in results:
        for acl in acls:
            for policy in acl.get("policies") or []:
                for entry in policy.get("entries") or []:
                    rows.append({"broker": addr, "subject": acl.get("subject"), "resource": entry.get("resource"),
                                 "actions": ",".join(entry.get("actions") or []),
                                 "sourceIps": ",".join(entry.get("sourceIps") or []),
                                 "decision": entry.get("decision")})
    Output(json).table([Column("Server", "broker"), *ACL_COLUMNS], rows)


@app.command("getAcl")
def get_acl(subject: SubjectOpt, namesrv: NamesrvOpt = DEFAULT_NAMESRV, broker_addr: BrokerAddrOpt = None,
            cluster_name: ClusterOpt = None, access_key: AccessKeyOpt = None, secret_key: SecretKeyOpt = None,
            json: JsonOpt = False):
    """Show a subject's ACL."""
    from client import acl_admin

    async def one(admin, addr):
        return [await acl_admin.get_acl(admin, addr, subject)]

    _show_acls(json, _each_broker(namesrv, broker_addr, cluster_name, access_key, secret_key, one))


@app.command("listAcl")
def list_acl(subject: Annotated[str, typer.Option("-s", "--subject", help="Subjects containing this.")] = "",
             resource: Annotated[str, typer.Option("-r", "--resources", help="Resources containing this.")] = "",
             namesrv: NamesrvOpt = DEFAULT_NAMESRV, broker_addr: BrokerAddrOpt = None,
             cluster_name: ClusterOpt = None, access_key: AccessKeyOpt = None, secret_key: SecretKeyOpt = None,
             json: JsonOpt = False):
    """List ACLs."""
    from client import acl_admin

    _show_acls(json, _each_broker(namesrv, broker_addr, cluster_name, access_key, secret_key,
                                  lambda admin, addr: acl_admin.list_acls(admin, addr, subject, resource)))

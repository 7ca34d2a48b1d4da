"""mqctl: the operator CLI. This module only composes the command groups and maps errors.

Commands keep mqadmin's camelCase names and letters (clusterList -n ..., updateTopic -c ... -t ...); chaos and
dev commands are pyrmq's own. Any known exception (pyrmq errors, remoting transport errors, Docker errors) becomes
``error: <what failed>; <what to do>`` on stderr with exit code 1; usage errors are Typer's, exit code 2.
Command modules import the SDK and docker inside their functions, so ``mqctl --help`` stays fast.
"""

from __future__ import annotations

import os
import sys

import typer
from typer.core import TyperGroup

from ctl import acl, chaos, cluster, controller, dev, group, ha, health, message, query, topic, trace
from ctl.errors import describe

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130


def report(exc: BaseException) -> int | None:
    """Print a known exception as one line; the exit code, or None when the exception is not known."""
    line = describe(exc)
    if line is None:
        return None
    typer.echo(f"error: {line}", err=True)
    return EXIT_ERROR


class MqctlGroup(TyperGroup):
    """The root group: known exceptions from any command end as one line and exit code 1."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, BrokenPipeError):
            raise
        except Exception as exc:
            code = report(exc)
            if code is None:
                raise
            raise typer.Exit(code) from None


app = typer.Typer(
    cls=MqctlGroup,
    name="mqctl",
    help="Operate a pyrmq cluster: mqadmin's commands, failure injection and a local dev cluster.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def connection_options(
    tls: bool = typer.Option(False, "--tls", envvar="MQCTL_TLS", help="Connect to every server with TLS."),
    tls_ca: str = typer.Option("", "--tls-ca", envvar="MQCTL_TLS_CA",
                               help="CA certificate (PEM) the servers' certificates chain to (default: the system's)."),
    tls_cert: str = typer.Option("", "--tls-cert", envvar="MQCTL_TLS_CERT",
                                 help="Client certificate (PEM), where servers require one (mutual TLS)."),
    tls_key: str = typer.Option("", "--tls-key", envvar="MQCTL_TLS_KEY", show_default=False,
                                help="The client certificate's private key (PEM)."),
) -> None:
    """Options for every command: how to connect (ACL credentials come from MQCTL_ACCESS_KEY/MQCTL_SECRET_KEY)."""
    from ctl.rpc import use_credentials, use_tls

    use_credentials(None)
    try:
        use_tls(tls=bool(tls or tls_ca or tls_cert or tls_key), ca=tls_ca, cert=tls_cert, key=tls_key)
    except ValueError as exc:
        raise typer.BadParameter(str(exc).replace("tls_ca", "--tls-ca")) from None


for module in (cluster, ha, controller, topic, group, message, query, trace, acl, chaos):
    app.add_typer(module.app)
app.add_typer(health.app, name="cluster")
app.add_typer(dev.app, name="dev")


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("error: interrupted", err=True)
        raise SystemExit(EXIT_INTERRUPTED) from None
    except BrokenPipeError:
        # the reader went away (`mqctl clusterList | head -1`): stop quietly, and keep Python from
        # complaining again when it flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(EXIT_ERROR) from None
    except Exception as exc:  # raised outside a command (e.g. while parsing); same mapping
        code = report(exc)
        if code is None:
            raise
        raise SystemExit(code) from None


if __name__ == "__main__":
    main()

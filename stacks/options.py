"""Every option of the long-running commands, in one table: `python -m automation serve` (the service), `api` (the
registry API) and the one environment-backed flag of `agent`. Each option has its flag, its type, its default, the
environment variable that overrides that default (listed in --help), its help, its group in --help and the
commands that take it.

`--help` is generated from the table (add_options), and so is what the commands are built from: the service's
ServiceOptions and the engine's PulumiSettings (automation/service/options.py, automation/adapters/engine/settings.py)
and the API's ApiSettings (automation/api/app.py) take their defaults here, and read the parsed flags by name
(values). The environment is read once, by add_options, for the defaults; environment() gives the same values to a
caller without a command line (a worker process, a test). Secrets are never options: they stay in the environment
(NOT_OPTIONS lists every variable hubwright reads that is not in the table, and why). Pure: no I/O, argparse only.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from stacks.names import ROLE_MAP_CONFIGMAP
from stacks.release import default_image
from stacks.sources.families import help_text

SERVE, API, AGENT, RUNNER, CONSOLE = "serve", "api", "agent", "runner", "console"
BOTH = (SERVE, API)
RUNS = (SERVE, RUNNER)  # the options of whatever runs Pulumi: the service (--executor local) and the runners

# Groups in --help
KUBE, WORK, SERVING, ELECTION = "Kubernetes", "work queue", "probes and metrics", "leader election"
RUNNERS = "runners"
STATE, POLICY, AWS, LOGGING = "Pulumi state", "policy", "AWS", "logging"
API_SERVING, FACTS, INSTALL = "serving", "facts history", "bootstrap and install"
VIEWERS = "viewers"  # the console's sign-in and what a viewer may see

_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}


@dataclass(frozen=True)
class Option:
    """One flag. `default` is per command when it is a mapping {command: default} (--state-dir: `serve` keeps its
    workspaces in ./state, `api` its facts history in .); a callable default is called when asked for."""

    flag: str  # without the dashes: "lease-duration"; its value is read as `lease_duration`
    kind: type  # str, int, float or bool (bool: --x / --no-x)
    default: Any
    help: str
    group: str
    commands: tuple[str, ...]
    env: str | None = None  # overrides the default when set
    choices: tuple[str, ...] | None = None
    hidden: bool = False  # accepted, never shown: kept so that older command lines still start
    required: bool = False  # unless `env` is set

    @property
    def dest(self) -> str:
        return self.flag.replace("-", "_")

    def default_for(self, command: str) -> Any:
        value = self.default.get(command) if isinstance(self.default, Mapping) else self.default
        return value() if callable(value) else value

    def from_environment(self, command: str, environ: Mapping[str, str]) -> Any:
        """The default `command` starts with: the environment variable's value (converted), else the default."""
        raw = environ.get(self.env) if self.env else None
        if raw is None:
            return self.default_for(command)
        return convert(self, raw)


def convert(option: Option, raw: str) -> Any:
    """An environment variable's text as the option's type; a clear error naming both when it is not one."""
    try:
        if option.kind is bool:
            if raw.strip().lower() not in _TRUE | _FALSE:
                raise ValueError(raw)
            return raw.strip().lower() in _TRUE
        value = option.kind(raw)
    except ValueError:
        raise ValueError(f"{option.env}={raw!r} (--{option.flag}): not a {option.kind.__name__}") from None
    if option.choices and value not in option.choices:
        raise ValueError(f"{option.env}={raw!r} (--{option.flag}): not one of {', '.join(option.choices)}")
    return value


def _o(flag: str, kind: type, default: Any, help: str, group: str, commands: str | tuple[str, ...] = SERVE,
       **more: Any) -> Option:
    return Option(flag, kind, default, help, group, (commands,) if isinstance(commands, str) else commands, **more)


OPTIONS: tuple[Option, ...] = (
    # ------------------------------------------------------------------ Kubernetes (serve and api)
    _o("kubeconfig", str, None, "kubeconfig file; unset: the in-cluster service account when running in a pod, "
       "else ~/.kube/config", KUBE, (SERVE, API, RUNNER, CONSOLE), env="KUBECONFIG"),
    _o("context", str, None, "kubeconfig context (default: the current one)", KUBE, (SERVE, API, RUNNER, CONSOLE)),
    _o("namespace", str, "hubwright-system", "the service's own namespace: its Lease and the role-map ConfigMap live "
       "here, and the Secrets that hold the inputs of stack runs", KUBE, (SERVE, RUNNER, CONSOLE),
       env="POD_NAMESPACE"),
    _o("watch-namespace", str, None, "watch Clusters in this namespace only (default: all namespaces)", KUBE),
    _o("hub-name", str, "default", "the cluster-scoped HubConfig this service serves (api: the one whose shared "
       "ingress install answers use, the service's --hub-name)", KUBE, (SERVE, API, CONSOLE),
       env="HUBWRIGHT_HUB_NAME"),
    _o("role-map-configmap", str, ROLE_MAP_CONFIGMAP, "ConfigMap (in --namespace) mapping AWS account IDs to the "
       "IAM role to assume there", KUBE, (SERVE, CONSOLE)),
    _o("watch-timeout", int, 300, "seconds per watch request; renewed from the last version seen, without a relist",
       KUBE),
    _o("tenants", bool, True, "run the tenant controller: each Tenant gets its Namespace, annotated with its owner "
       "account and region, and a RoleBinding for its admins (cluster-wide: needs "
       "stacks.admission.tenant_controller_rules())", KUBE),
    _o("gitrepos", bool, True, "run the Git repository controllers (only with --tenants): each HubTenant's templates "
       "make HubGitRepos, and each HubGitRepo becomes a repository on its forge, with the token of a Secret in "
       "--namespace (needs stacks.admission.gitrepo_controller_rules() and get on Secrets in --namespace)", KUBE),
    _o("gitrepo-resync", float, 300.0, "seconds between two looks at every HubGitRepo: drift on the forge (a deploy "
       "key removed by hand) is put back, a refused one looked at again", KUBE),
    _o("sources", str, "auto", help_text(), KUBE),
    _o("sources-recheck", float, 60.0, "seconds between two looks, under --sources auto, for a source kind whose CRD "
       "was not served at start: one installed since is said once (a Warning log line and /readyz), as it is "
       "watched only after a restart", KUBE),
    _o("token-cache", int, 1024, "Kubernetes clients kept, one per caller's token (least recently used go first)",
       KUBE, API),
    _o("kube-connect-timeout", float, 5.0, "seconds every Kubernetes call waits to connect (then the request "
       "answers 504)", KUBE, (API, CONSOLE)),
    _o("kube-read-timeout", float, 30.0, "seconds every Kubernetes call waits for each read of its answer (then "
       "504)", KUBE, (API, CONSOLE)),
    # ------------------------------------------------------------------ the service's work queue
    _o("workers", int, {SERVE: 4, RUNNER: 1}, "serve: stacks updated in parallel (one run per stack at a time), "
       "each in a worker process of its own (with --executor runners: runs awaited at once); runner: runs this "
       "runner executes at once", WORK, RUNS),
    _o("run-timeout", float, 1800.0, "seconds one Pulumi run may take; then it is cancelled (SIGINT, Pulumi's "
       "graceful cancel), its process tree killed after --cancel-grace, and its lock recovered", WORK, RUNS),
    _o("cancel-grace", float, 60.0, "seconds a cancelled run (timed out, or in flight at shutdown) gets to stop by "
       "itself before its whole process tree is killed; the pod's terminationGracePeriodSeconds covers it", WORK,
       RUNS),
    _o("worker-runs", int, 50, "runs a worker process serves before it is replaced by a fresh one", WORK, RUNS),
    # ------------------------------------------------------------------ runners (docs/service.md, "Runners")
    _o("executor", str, "local", "where Pulumi runs: 'local' in the service's own worker processes, or 'runners': "
       "each run is a HubStackRun that a pool of runner pods (`python -m automation runner`) executes",
       RUNNERS, choices=("local", "runners")),
    _o("keep-runs", int, 10, "finished HubStackRuns kept per stack (the oldest are deleted; a run's Secret goes "
       "once its result is read)",
       RUNNERS),
    _o("claim-ttl", float, 30.0, "seconds a runner's claim on a run lasts unless renewed (every third of it); a "
       "runner that cannot renew kills its run first, and another runner takes the run over once it lapsed",
       RUNNERS, RUNS),
    _o("runner-hosts", str, "hubwright-runner-[a-z0-9]+-[a-z0-9]+", "regex of the runners' host names (their pod "
       "names): a stack lock one of them wrote is stale once it holds no live claim on the stack", RUNNERS, RUNS,
       env="HUBWRIGHT_RUNNER_HOSTS"),
    _o("backoff-base", float, 2.0, "seconds before the first retry of a failure", WORK),
    _o("backoff-cap", float, 300.0, "retries double their wait (with jitter) up to this many seconds, and keep "
       "retrying", WORK),
    _o("lock-retry", float, 15.0, "seconds (jittered) before trying again a stack another update holds", WORK),
    _o("settle", float, 0.5, "seconds a cluster that changed during its own run waits for its changes to stop "
       "before it runs again (a burst of edits costs two runs; capped at 20x)", WORK),
    _o("drift-interval", float, 3600.0, "seconds between drift checks (pulumi preview --refresh) of each stack, "
       "stretched by up to --drift-jitter per stack; 0 turns drift checks off", WORK),
    _o("drift-jitter", float, 0.25, "fraction the drift interval is stretched by", WORK),
    _o("drift-policy", str, "correct", "what a drift check that finds the cloud changed does: 'correct' runs "
       "`pulumi up --refresh` to put it back, 'report' only sets the DriftDetected condition (an Event and the "
       "hubwright_drifted_stacks metric either way)", WORK, choices=("correct", "report")),
    _o("stalled-recheck", float, 600.0, "seconds before a cluster Stalled on something a person must fix "
       "(AccessDenied, a wrong account) is looked at again; an input change or the hubwright.io/reconcile-request "
       "annotation looks at once", WORK),
    _o("endpoint-census-interval", float, 600.0, "seconds between counts of the endpoints in the inventory VPCs "
       "that hubwright did not make, which placement leaves room for (also once at start); 0 turns the census off",
       WORK),
    # ------------------------------------------------------------------ the service's probes and leader election
    _o("metrics-bind", str, "0.0.0.0", "address of /healthz, /readyz and /metrics", SERVING, RUNS),
    _o("metrics-port", int, 8080, "port of /healthz, /readyz and /metrics", SERVING, RUNS),
    _o("leader-election", bool, True, "hold a coordination.k8s.io Lease before running anything (run one replica "
       "without it only)", ELECTION),
    _o("leader-election-id", str, "hubwright", "the Lease's name (in --namespace)", ELECTION),
    _o("lease-duration", float, 15.0, "seconds a follower waits on an unrenewed Lease before taking it", ELECTION),
    _o("renew-deadline", float, 10.0, "seconds the leader keeps trying to renew before it stops (and exits)",
       ELECTION),
    _o("retry-period", float, 2.0, "seconds between Lease attempts", ELECTION),
    _o("identity", str, None, "this replica's name in the Lease (default: hostname + random); a runner's name in "
       "its claims (default: its hostname, which the stack locks it writes carry)", ELECTION, RUNS,
       env="POD_NAME"),
    # ------------------------------------------------------------------ the stacks (serve), the history (api)
    _o("state-dir", str, {SERVE: "state", API: ".", RUNNER: "state", CONSOLE: "state"}, "serve and runner: per-stack "
       "workspaces, and the file:// backend when --backend is unset; api: where the default SQLite facts history "
       "lives (registry-facts.db)", STATE, (SERVE, API, RUNNER, CONSOLE),
       env="HUBWRIGHT_STATE_DIR"),
    _o("backend", str, None, "backend URL: file://..., s3://bucket/prefix, https://api.pulumi.com "
       "(default: file://<state-dir>); api: where it reads the run history from", STATE, (SERVE, API, RUNNER, CONSOLE),
       env="PULUMI_BACKEND_URL"),
    _o("history-store", str, "backend", "where each run's record, diff and engine log are kept (docs/history.md): "
       "backend (the state backend's own store, file:// or s3://), file:///path, s3://bucket/prefix?endpoint=..., "
       "or off", STATE, (SERVE, API, RUNNER, CONSOLE), env="HUBWRIGHT_HISTORY_STORE"),
    _o("history-keep", int, 100, "run records kept per stack in the history store (the oldest go, with their "
       "diffs and logs)", STATE, env="HUBWRIGHT_HISTORY_KEEP"),
    _o("history-log-kib", int, 64, "KiB of a run's engine log kept (its end)", STATE, RUNS,
       env="HUBWRIGHT_HISTORY_LOG_KIB"),
    _o("pulumi-org", str, None, "Pulumi Cloud organization for the stacks", STATE, RUNS, env="HUBWRIGHT_PULUMI_ORG"),
    _o("secrets-provider", str, None, "stack secrets provider (default: passphrase on DIY backends, the service on "
       "Cloud)", STATE, RUNS, env="HUBWRIGHT_SECRETS_PROVIDER"),
    _o("pulumi-home", str, None, "the Pulumi CLI's home: workspace settings and plugin cache (default: the CLI's, "
       "~/.pulumi)", STATE, RUNS, env="PULUMI_HOME"),
    _o("lock-hosts", str, None, "regex of the hosts whose stack locks are this service's, e.g. the pods of its "
       "Deployment (default: this host only)", STATE, RUNS, env="HUBWRIGHT_LOCK_HOSTS"),
    _o("stale-lock-seconds", float, None, "a lock of this service on another host (or a Cloud update of ours) older "
       "than this is stale and recovered (default: longer than any run may take, from --run-timeout and "
       "--cancel-grace)", STATE, RUNS, env="HUBWRIGHT_STALE_LOCK_SECONDS"),
    _o("policy", str, "mandatory", "the policy pack on every up and preview: mandatory (each rule at its own "
       "level), advisory, or off (the emergency switch)", POLICY, RUNS, env="HUBWRIGHT_POLICY"),
    _o("policy-config", str, None, "a policy pack config file, in Pulumi's format", POLICY, RUNS,
       env="HUBWRIGHT_POLICY_CONFIG"),
    _o("policy-pack", str, None, "the policy pack's folder (default: the one this release ships, policy/)", POLICY,
       RUNS,
       env="HUBWRIGHT_POLICY_PACK"),
    _o("aws-endpoint-url", str, None, "send every AWS API call here (a moto server in tests; botocore's own "
       "AWS_ENDPOINT_URL* variables work as well)", AWS, RUNS, env="HUBWRIGHT_AWS_ENDPOINT_URL"),
    # ------------------------------------------------------------------ logging
    _o("log-level", str, "INFO", "DEBUG, INFO, WARNING or ERROR", LOGGING, (SERVE, API, RUNNER, CONSOLE),
       env="HUBWRIGHT_LOG_LEVEL",
       choices=("DEBUG", "INFO", "WARNING", "ERROR")),
    _o("log-format", str, "text", "text for a person, or json: one object a line {time, level, logger, message, "
       "...} for a log shipper; each engine run writes one line (logger hubwright.run)", LOGGING, RUNS,
       env="HUBWRIGHT_LOG_FORMAT"),
    # ------------------------------------------------------------------ the registry API
    # Not serve's metrics port (8080): both run on one machine by hand; the pod binds 0.0.0.0:8080.
    _o("bind", str, "127.0.0.1:8081", "host:port to listen on (:8081 or 0.0.0.0:8081: every address)",
       API_SERVING, API, env="HUBWRIGHT_API_BIND"),
    _o("public-url", str, None, "where agents reach this API, written into their manifests (default: "
       "http://<bind>)", API_SERVING, API, env="HUBWRIGHT_PUBLIC_URL"),
    _o("caller-concurrency", int, 8, "requests one caller (bearer token) may have in flight at once, per replica "
       "(429 beyond)", API_SERVING, API),
    _o("caller-rate", float, 20.0, "requests per second one caller (bearer token) may make, per replica (429 "
       "beyond)", API_SERVING, API),
    _o("caller-burst", int, 100, "requests one caller (bearer token) may make at once above --caller-rate, per "
       "replica", API_SERVING, API),
    _o("caller-scan-rate", float, 1.0, "fact-filtered lists per second one caller may make (one at a time), per "
       "replica", API_SERVING, API),
    _o("caller-scan-burst", int, 10, "fact-filtered lists one caller may make in a burst above --caller-scan-rate",
       API_SERVING, API),
    _o("facts-db", str, None, "SQLAlchemy URL of the history: sqlite:///path.db (one replica) or postgresql://... "
       "(several) (default: sqlite:///<state-dir>/registry-facts.db)", FACTS, API, env="HUBWRIGHT_FACTS_DB"),
    _o("facts-retention", int, 1000, "versions kept per cluster (the oldest go first; the latest is always kept)",
       FACTS, API),
    _o("install-rate", float, 1.0, "install requests per second per client address, per replica", INSTALL, API),
    _o("install-burst", int, 10, "install requests a client address may make at once, per replica", INSTALL, API),
    _o("trust-forwarded-for", bool, False, "rate-limit by X-Forwarded-For: only behind a proxy you run that sets it",
       INSTALL, API),
    _o("agent-image", str, default_image, "the facts agent's image: hubwright's, pinned by version or digest "
       "(repo@sha256:...), never :latest (default: this release's)", INSTALL, API, env="HUBWRIGHT_AGENT_IMAGE"),
    _o("agent-token-seconds", int, 86400, "lifetime of the agent's ServiceAccount token (it requests a new one "
       "before expiry through this API), capped by the hub's maxTokenLifetime", INSTALL, API),
    # Agents rotate their token through the API now, never at the hub's Kubernetes API: accepted so that existing
    # command lines still start, and ignored.
    _o("hub-url", str, None, "", INSTALL, API, hidden=True),
    _o("hub-ca", str, None, "", INSTALL, API, hidden=True),
    # ------------------------------------------------------------------ the console (docs/console.md)
    _o("console-bind", str, "127.0.0.1:8082", "host:port the console listens on (:8082 or 0.0.0.0:8082: every "
       "address)", API_SERVING, CONSOLE, env="HUBWRIGHT_CONSOLE_BIND"),
    _o("tls-cert", str, None, "serve HTTPS with this certificate (PEM; with --tls-key); cookies are then Secure",
       API_SERVING, CONSOLE, env="HUBWRIGHT_CONSOLE_TLS_CERT"),
    _o("tls-key", str, None, "the private key of --tls-cert (PEM)", API_SERVING, CONSOLE,
       env="HUBWRIGHT_CONSOLE_TLS_KEY"),
    _o("secure-cookies", bool, False, "mark cookies Secure without --tls-cert: behind a proxy that terminates TLS",
       API_SERVING, CONSOLE, env="HUBWRIGHT_CONSOLE_SECURE_COOKIES"),
    _o("session-hours", float, 8.0, "the longest a sign-in lasts; a token's own expiry (its exp) ends it sooner",
       VIEWERS, CONSOLE),
    _o("access-cache-seconds", float, 10.0, "how long one SubjectAccessReview answer (viewer, namespace, resource, "
       "verb) is reused", VIEWERS, CONSOLE),
    _o("page-size", int, 100, "clusters on one page of the fleet", VIEWERS, CONSOLE),
    # ------------------------------------------------------------------ the facts agent (on the tenant's cluster)
    _o("api", str, None, "the registry API's URL", "registry", AGENT, env="HUBWRIGHT_API_URL", required=True),
)

# Every environment variable hubwright's own code reads that is not an option above, and why it is not one.
NOT_OPTIONS: Mapping[str, str] = {
    "PULUMI_CONFIG_PASSPHRASE": "a secret: the passphrase of DIY backends (never on a command line)",
    "PULUMI_CONFIG_PASSPHRASE_FILE": "where that secret is (a mounted Secret)",
    "PULUMI_ACCESS_TOKEN": "a secret: Pulumi Cloud's token",
    "KUBERNETES_SERVICE_HOST": "set by the kubelet: running in a pod (the in-cluster ServiceAccount is used)",
    "AWS_WEB_IDENTITY_TOKEN_FILE": "botocore's credential chain (IRSA): only named in a message",
    "AWS_ROLE_ARN": "botocore's credential chain (IRSA): only named in a message",
    "AWS_ACCESS_KEY_ID": "a secret of botocore's credential chain: only named in a message",
    "AWS_PROFILE": "botocore's credential chain: only named in a message",
    "AWS_REGION": "the state bucket's region when its s3:// URL names none, read first as the pulumi CLI reads it "
                  "(botocore reads only the DEFAULT one): the history store finds the same bucket",
    "AWS_ENDPOINT_URL": "botocore's own endpoint override (it reads it, hubwright does not): named in --help",
    "HUBWRIGHT_PLAN_CACHE": "the offline plan's cache folder: the default of `plan --cache` (first choice)",
    "HUBWRIGHT_CACHE": "the folder of the built tools and venvs: the default of `plan --cache` is its plans/",
    "XDG_CACHE_HOME": "the user's cache folder (XDG): the default of `plan --cache` is its hubwright/plans/",
    "XDG_STATE_HOME": "the user's state folder (XDG): the default of `sandbox --dir` is its hubwright/sandbox/",
    "KUBEBUILDER_ASSETS": "controller-runtime envtest's folder of etcd and kube-apiserver: where `sandbox` looks "
                          "for them first (automation/sandbox/tools.py)",
    "NO_COLOR": "https://no-color.org: the plan's diff is not coloured, even on a terminal",
    "TERM": "TERM=dumb: the plan's diff is not coloured",
    "GOGC": "Go's collector target: passed on to the pulumi CLI as set, else 400 "
            "(automation.adapters.engine.pulumi_engine)",
    "PYTHONPATH": "passed on, REF's program's folder first, to the plan `plan --baseline-ref` runs in a worktree",
}


def option(flag: str) -> Option:
    """The option of that flag ("state-dir")."""
    for found in OPTIONS:
        if found.flag == flag:
            return found
    raise KeyError(flag)


def of(command: str) -> tuple[Option, ...]:
    return tuple(o for o in OPTIONS if command in o.commands)


def default(flag: str, command: str = SERVE) -> Any:
    """An option's default (what a dataclass field built from the table starts with)."""
    return option(flag).default_for(command)


def default_factory(flag: str, command: str = SERVE) -> Callable[[], Any]:
    return lambda: default(flag, command)


def environment(command: str, environ: Mapping[str, str]) -> dict[str, Any]:
    """{dest: value}: each of the command's options as the environment (else the default) sets it; what the
    command line gives when no flag is passed, for callers without one."""
    return {o.dest: o.from_environment(command, environ) for o in of(command)}


def values(args: argparse.Namespace | Mapping[str, Any], command: str, names: Iterable[str] | None = None
           ) -> dict[str, Any]:
    """{dest: value} of the command's options in the parsed flags (only `names`, when given)."""
    parsed = vars(args) if isinstance(args, argparse.Namespace) else args
    wanted = None if names is None else set(names)
    return {o.dest: parsed[o.dest] for o in of(command) if (wanted is None or o.dest in wanted) and o.dest in parsed}


class HelpFormatter(argparse.HelpFormatter):
    """Each option's help with its default, when it has one the help does not already give."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default not in (None, argparse.SUPPRESS) and "default" not in text \
                and not isinstance(action.default, bool):
            text += " (default: %(default)s)"
        return text


def _typed(o: Option) -> Callable[[str], Any]:
    """argparse's `type` for the option: the flag's text (or its environment variable's, which argparse converts
    the same way, and only when the command runs) as the option's type, one of its choices."""
    def typed(raw: str) -> Any:
        value = o.kind(raw)
        if o.choices and value not in o.choices:
            raise argparse.ArgumentTypeError(f"{raw!r} is not one of {', '.join(o.choices)}"
                                             + (f" (flag or env {o.env})" if o.env else ""))
        return value
    typed.__name__ = o.kind.__name__  # argparse names it in "invalid float value: ..."
    return typed


def add_options(parser: argparse.ArgumentParser, command: str, environ: Mapping[str, str]) -> None:
    """One flag per option `command` takes, in its group, its environment variable named in its help and read
    (from `environ`, once) for its default."""
    groups: dict[str, Any] = {}
    for o in of(command):
        group = groups.get(o.group) or groups.setdefault(o.group, parser.add_argument_group(o.group))
        raw = environ.get(o.env) if o.env else None
        text = argparse.SUPPRESS if o.hidden else o.help + (f" (env {o.env})" if o.env else "")
        if o.kind is bool:
            value = o.default_for(command) if raw is None else convert(o, raw)
            group.add_argument("--" + o.flag, action=argparse.BooleanOptionalAction, default=value, help=text)
        else:  # a text default (the environment's) is converted and checked by argparse, as a flag's value is
            value = o.default_for(command) if raw is None else raw
            group.add_argument("--" + o.flag, type=_typed(o), default=value, help=text, choices=o.choices,
                               required=o.required and value is None)

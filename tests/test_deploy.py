"""The deployment files (``Dockerfile``, ``deploy/compose.yaml``, ``deploy/haproxy.cfg``,
``deploy/k8s/``), checked offline with real validators, since neither ``docker`` nor ``kubectl`` runs
on the test machine:

* the compose file against the Compose Specification's JSON schema (vendored in check-jsonschema);
* every Kubernetes manifest against the Kubernetes schemas bundled in kubernetes-validate (strict:
  an unknown field is an error);
* the HAProxy configuration with ``haproxy -c`` (Debian's haproxy);
* the Dockerfile's instructions (dockerfile-parse): its stages, a non-root final user, COPY sources
  that exist and are not excluded by ``.dockerignore``;
* every ``clawlet …`` command the files run is accepted by the real command line, and every
  ``CLAWLET_*`` variable they set is one clawlet reads.

Each check is a function returning its problems; each test also feeds it a broken copy, so a check
that stopped finding anything would fail. The last test runs the files' own settings for real: two
``clawlet control-plane serve`` processes as compose starts them, behind HAProxy running
``deploy/haproxy.cfg`` (addresses moved to loopback), with the health checks and probes the files
name, and an execution plane started from the bootstrap's credentials that fails over between them.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import io
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import kubernetes_validate
import pytest
import yaml
from dockerfile_parse import DockerfileParser

from clawlet.cli import build_parser
from clawlet.config import Settings
from tests.conftest import free_port
from tests.support import postgres

pytestmark = pytest.mark.slow  # starts processes: not in `pytest -m "not slow"`

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
HAPROXY_CFG = DEPLOY / "haproxy.cfg"
K8S = DEPLOY / "k8s"
DOCKERFILE = ROOT / "Dockerfile"
INIT_ENV = DEPLOY / "init-env"
HEALTHCHECK = DEPLOY / "healthcheck.py"
#: the oldest Kubernetes the manifests are written for (user namespaces, procMount, appArmorProfile)
K8S_VERSION = "1.33"
#: the broker setting, added beside this work (issue 15 §3)
PENDING_VARIABLES = {"CLAWLET_REDIS_URL"}
CLAWLET_IMAGE = "clawlet:"
DEADLINE = 120.0
COMMAND_IN_TEXT = re.compile(r"\bclawlet ((?:control-plane|exec-plane|serve)\b[^|>\\`\n#]*)")


# -- loading ------------------------------------------------------------------------------------


def load_compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def k8s_documents() -> list[tuple[str, dict[str, Any]]]:
    """Every manifest in deploy/k8s as (file name, document)."""
    found: list[tuple[str, dict[str, Any]]] = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc:
                found.append((path.name, doc))
    return found


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    parser = DockerfileParser(fileobj=io.BytesIO(text.encode()))
    return [
        (item["instruction"], item["value"]) for item in parser.structure if item["instruction"] != "COMMENT"
    ]


def env_file_keys(path: Path) -> set[str]:
    keys = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        name, sep, _ = line.strip().partition("=")
        if sep and not name.startswith("#"):
            keys.add(name.strip())
    return keys


def init_env(target: Path) -> Path:
    subprocess.run([str(INIT_ENV), str(target)], check=True, capture_output=True, timeout=60)
    return target


# -- the checks -----------------------------------------------------------------------------------


def compose_problems(doc: dict[str, Any]) -> list[str]:
    """What the Compose Specification's schema says about ``doc``."""
    schema_file = files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    schema = json.loads(schema_file.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def k8s_problems(docs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """What the bundled Kubernetes schemas say (strict: unknown fields are errors)."""
    problems = []
    for name, doc in docs:
        where = f"{name}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{where}: {'.'.join(map(str, exc.path))}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            problems.append(f"{where}: {exc.message}")
    return problems


def haproxy_problems(config: Path) -> list[str]:
    """``haproxy -c``'s errors and warnings, except the container names it cannot resolve here."""
    done = subprocess.run(
        ["haproxy", "-c", "-f", str(config)], capture_output=True, text=True, timeout=60, check=False
    )
    output = done.stdout + done.stderr
    problems = [
        line
        for line in output.splitlines()
        if re.search(r"\[(ALERT|WARNING)\]", line) and "could not resolve address" not in line
    ]
    if done.returncode != 0 or "Configuration file is valid" not in output:
        problems.append(f"haproxy -c exited {done.returncode}: {output.strip()}")
    return problems


def dockerignore_pattern(pattern: str) -> re.Pattern[str]:
    """A ``.dockerignore`` pattern as a regular expression (``**`` any directories, ``*`` and ``?``
    within one path segment)."""
    out = ""
    rest = pattern.strip("/")
    while rest:
        if rest.startswith("**/"):
            out, rest = out + "(?:.*/)?", rest[3:]
        elif rest.startswith("**"):
            out, rest = out + ".*", rest[2:]
        elif rest[0] == "*":
            out, rest = out + "[^/]*", rest[1:]
        elif rest[0] == "?":
            out, rest = out + "[^/]", rest[1:]
        else:
            out, rest = out + re.escape(rest[0]), rest[1:]
    return re.compile(out)


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Whether ``.dockerignore``'s ``patterns`` exclude ``path`` (or a directory above it); a later
    ``!pattern`` brings it back."""
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        regex = dockerignore_pattern(pattern.removeprefix("!"))
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            excluded = not negate
    return excluded


def dockerfile_problems(text: str, dockerignore: str) -> list[str]:
    """The stages the image needs, a non-root final user, COPY sources in the build context."""
    instructions = dockerfile_instructions(text)
    ignore = [line.strip() for line in dockerignore.splitlines() if line.strip() and not line.startswith("#")]
    problems = []
    stages = [value.split()[-1] for name, value in instructions if name == "FROM" and " AS " in value.upper()]
    if stages != ["web", "python", "runtime"]:
        problems.append(f"stages {stages}, expected web, python, runtime")
    final: list[tuple[str, str]] = []
    for name, value in instructions:
        final = [] if name == "FROM" else [*final, (name, value)]
    users = [value for name, value in final if name == "USER"]
    if not users or users[-1].split(":")[0] in ("root", "0"):
        problems.append(f"the final stage runs as {users[-1] if users else 'root'}")
    entrypoints = [json.loads(value) for name, value in final if name == "ENTRYPOINT"]
    if not entrypoints or entrypoints[-1][-1] != "clawlet":
        problems.append("the final stage's ENTRYPOINT does not run clawlet")
    if not any(name == "HEALTHCHECK" for name, _ in final):
        problems.append("no HEALTHCHECK")
    for name, value in instructions:
        if name not in ("COPY", "ADD"):
            continue
        words = shlex.split(value)
        if any(word.startswith("--from=") for word in words):
            continue
        sources = [word for word in words if not word.startswith("--")][:-1]
        for source in sources:
            if not (ROOT / source).exists():
                problems.append(f"COPY {source}: not in the repository")
            elif dockerignored(source, ignore):
                problems.append(f"COPY {source}: excluded by .dockerignore")
    return problems


def clawlet_commands() -> list[list[str]]:
    """Every ``clawlet`` command line the deployment files run or tell the reader to run."""
    commands: list[list[str]] = []
    for service in load_compose()["services"].values():
        if str(service.get("image", "")).startswith(CLAWLET_IMAGE) and "command" in service:
            commands.append([str(arg) for arg in service["command"]])
    for _, doc in k8s_documents():
        pod = doc.get("spec", {}).get("template", {}).get("spec", {})
        for container in pod.get("containers", []):
            if container["image"].startswith(CLAWLET_IMAGE):
                commands.append(container.get("args", []))
    instructions = dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8"))
    commands.append(json.loads(next(value for name, value in reversed(instructions) if name == "CMD")))
    # and the ones the comments tell the reader to run (the bootstrap): up to a pipe, a redirect,
    # a line continuation, a backtick or the end of the line
    for path in [COMPOSE, *K8S.glob("*.yaml")]:
        for match in COMMAND_IN_TEXT.finditer(path.read_text(encoding="utf-8")):
            commands.append(shlex.split(match.group(1)))
    unique: list[list[str]] = []
    for command in commands:
        if command not in unique:
            unique.append(command)
    return unique


def command_problems(command: list[str]) -> list[str]:
    """What the real command line says about ``command``: its parser (unknown options too), then
    ``python -m clawlet <command> --help``."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            build_parser().parse_args(command)
    except SystemExit as exc:  # argparse's way of refusing
        return [f"clawlet {shlex.join(command)}: exit {exc.code}: {stderr.getvalue().strip()}"]
    done = subprocess.run(
        [sys.executable, "-m", "clawlet", *command, "--help"],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    if done.returncode != 0:
        return [f"clawlet {shlex.join(command)} --help exited {done.returncode}: {done.stderr.strip()}"]
    return []


def variables_set(compose: dict[str, Any], env_dir: Path) -> set[str]:
    """Every CLAWLET_* variable the deployment files set."""
    names: set[str] = set()
    for service in compose["services"].values():
        names.update(service.get("environment", {}))
    for path in env_dir.glob("*.env"):
        names.update(env_file_keys(path))
    for _, doc in k8s_documents():
        names.update(doc.get("data", {}))
        names.update(doc.get("stringData", {}))
        pod = doc.get("spec", {}).get("template", {}).get("spec", {})
        for container in pod.get("containers", []):
            names.update(item["name"] for item in container.get("env", []))
    for name, value in dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8")):
        if name == "ENV":
            names.update(word.split("=", 1)[0] for word in shlex.split(value))
    return {name for name in names if name.startswith("CLAWLET_")}


def variables_read() -> set[str]:
    """The CLAWLET_* variables clawlet reads: its settings' names and the ones its code names."""
    names = set(PENDING_VARIABLES)
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        choices = getattr(alias, "choices", [alias] if isinstance(alias, str) else [])
        if choices:
            names.update(str(choice) for choice in choices)
        else:
            names.add(f"CLAWLET_{name.upper()}")
    for path in (ROOT / "src" / "clawlet").rglob("*.py"):
        names.update(re.findall(r"[\"'](CLAWLET_[A-Z0-9_]+)[\"']", path.read_text(encoding="utf-8")))
    return names


# -- the compose file -----------------------------------------------------------------------------


def test_compose_file_matches_the_compose_specification() -> None:
    assert compose_problems(load_compose()) == []
    broken = load_compose()
    broken["services"]["redis"]["helthcheck"] = broken["services"]["redis"].pop("healthcheck")
    assert any("helthcheck" in problem for problem in compose_problems(broken))


def test_compose_runs_two_control_planes_on_postgres_and_redis_behind_haproxy() -> None:
    services = load_compose()["services"]
    assert {"postgres", "redis", "haproxy"} <= set(services)
    planes = [service for name, service in services.items() if name.startswith("control-plane-")]
    assert len(planes) == 2
    for plane in planes:
        assert plane["command"][:2] == ["control-plane", "serve"]
        assert plane["environment"]["CLAWLET_REDIS_URL"] == "redis://redis:6379/0"
        assert "env/control-plane.env" in plane["env_file"]
        assert {"postgres", "redis"} <= set(plane["depends_on"])
    assert len({str(plane["volumes"]) for plane in planes}) == 2  # each its own data directory
    assert "./haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro" in services["haproxy"]["volumes"]
    exec_planes = [service for name, service in services.items() if name.startswith("exec-plane-")]
    assert len(exec_planes) == 2
    for plane in exec_planes:
        assert plane["command"][0] == "exec-plane"
        assert plane["environment"]["CLAWLET_SANDBOX"] == "bubblewrap"
        assert {"seccomp=unconfined", "systempaths=unconfined"} <= set(plane["security_opt"])


def test_compose_secrets_come_from_the_env_files_init_env_makes(tmp_path: Path) -> None:
    compose = load_compose()
    secret = re.compile(r"PASSWORD|SECRET|TOKEN|API_KEY|DATABASE_URL|TICKET")
    for name, service in compose["services"].items():
        literal = [key for key in service.get("environment", {}) if secret.search(key)]
        assert literal == [], f"{name} sets secrets in compose.yaml: {literal}"
    made = init_env(tmp_path / "env")
    assert {path.name for path in made.iterdir()} == {"postgres.env", "control-plane.env", "model.env"}
    assert {oct(path.stat().st_mode & 0o777) for path in made.iterdir()} == {"0o600"}
    assert env_file_keys(made / "control-plane.env") == {"CLAWLET_CP_DATABASE_URL", "CLAWLET_CP_JWT_SECRET"}
    password = (made / "postgres.env").read_text().strip().removeprefix("POSTGRES_PASSWORD=")
    assert (
        len(password) == 64
        and f"clawlet:{password}@postgres:5432/" in (made / "control-plane.env").read_text()
    )
    # every env file compose reads is made by init-env, or by vm-credentials (the exec planes')
    for service in compose["services"].values():
        for entry in service.get("env_file", []):
            path = entry if isinstance(entry, str) else entry["path"]
            name = Path(path).name
            if name.startswith("exec-"):
                assert entry["required"] is False  # the stack starts before the users exist
            else:
                assert path == f"env/{name}" and (made / name).is_file(), path
    # a second run keeps the secrets
    before = (made / "control-plane.env").read_text()
    assert before == init_env(made).joinpath("control-plane.env").read_text()


# -- Kubernetes -----------------------------------------------------------------------------------


def test_kubernetes_manifests_match_the_kubernetes_schemas() -> None:
    docs = k8s_documents()
    assert k8s_problems(docs) == []
    broken = copy.deepcopy(docs)
    deployment = next(doc for _, doc in broken if doc["kind"] == "Deployment")
    deployment["spec"]["replica"] = deployment["spec"].pop("replicas")
    assert any("replica" in problem for problem in k8s_problems(broken))


def test_kubernetes_layout() -> None:
    docs = {(doc["kind"], doc["metadata"]["name"]): doc for _, doc in k8s_documents()}
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "Secret", "ConfigMap", "StatefulSet"} <= {
        kind for kind, _ in docs
    }
    control = docs[("Deployment", "clawlet-control-plane")]
    hpa = docs[("HorizontalPodAutoscaler", "clawlet-control-plane")]
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "clawlet-control-plane",
    }
    container = control["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"]["cpu"]  # what the HPA's utilisation is measured against
    assert {"readinessProbe", "livenessProbe"} <= set(container)
    service = docs[("Service", "clawlet-control-plane")]
    assert service["spec"]["selector"] == control["spec"]["selector"]["matchLabels"]
    args = container["args"]
    assert args[args.index("--public-url") + 1] == "http://clawlet-control-plane:8100"
    config = docs[("ConfigMap", "clawlet-control-plane")]
    assert config["data"]["CLAWLET_REDIS_URL"] == "redis://redis:6379/0"
    # one execution plane per user, its state on its own volume, its credentials in its Secret
    exec_plane = docs[("Deployment", "clawlet-exec-plane-alice")]
    pod = exec_plane["spec"]["template"]["spec"]
    assert exec_plane["spec"]["replicas"] == 1 and exec_plane["spec"]["strategy"]["type"] == "Recreate"
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] in {
        name for kind, name in docs if kind == "PersistentVolumeClaim"
    }
    assert {"secretRef": {"name": "clawlet-exec-plane-alice"}} in pod["containers"][0]["envFrom"]
    assert ("Secret", "clawlet-exec-plane-alice") in docs
    assert pod["securityContext"]["runAsNonRoot"] is True


# -- HAProxy --------------------------------------------------------------------------------------


@pytest.fixture
def haproxy_binary() -> str:
    binary = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    if binary is None:
        pytest.skip("haproxy is not installed (Debian package haproxy; scripts/test installs it when root)")
    return binary


def test_haproxy_config_passes_haproxy_check(haproxy_binary: str, tmp_path: Path) -> None:
    assert haproxy_problems(HAPROXY_CFG) == []
    text = HAPROXY_CFG.read_text(encoding="utf-8")
    for path in re.findall(r"http-check send meth GET uri (\S+)", text):
        assert path == "/health"  # what the control plane answers (the live test below)
    assert re.search(r"^\s*timeout tunnel\s+1h", text, re.M)
    broken = tmp_path / "broken.cfg"
    broken.write_text(text.replace("balance leastconn", "balance fastest"))
    assert haproxy_problems(broken) != []


# -- the Dockerfile -------------------------------------------------------------------------------


def test_dockerfile_stages_user_and_copy_sources() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    ignore = (ROOT / ".dockerignore").read_text(encoding="utf-8")
    assert dockerfile_problems(text, ignore) == []
    assert dockerfile_problems(text.replace("USER 10001:10001", "USER root"), ignore) != []
    assert dockerfile_problems(text.replace("COPY README.md", "COPY READ_ME.md"), ignore) != []
    assert dockerfile_problems(text, ignore + "\nREADME.md\n") != []
    # the workbench is built in the image and installed with the package
    assert "npm run build" in text and '"web/**/*"' in (ROOT / "pyproject.toml").read_text()
    assert "bubblewrap" in text


def test_every_clawlet_command_in_the_deployment_files_is_accepted_by_the_cli() -> None:
    commands = clawlet_commands()
    assert [c[:2] for c in commands if c[:2] == ["control-plane", "vm-credentials"]]  # the bootstrap
    assert ["exec-plane", "--state-dir", "/var/lib/clawlet/exec-plane"] in commands
    assert [problem for command in commands for problem in command_problems(command)] == []
    assert command_problems(["control-plane", "serve", "--listen", "0.0.0.0"]) != []


def test_every_clawlet_variable_set_is_one_clawlet_reads(tmp_path: Path) -> None:
    known, env_dir = variables_read(), init_env(tmp_path / "env")
    set_here = variables_set(load_compose(), env_dir)
    assert {"CLAWLET_CP_DATABASE_URL", "CLAWLET_CP_JWT_SECRET", "CLAWLET_SANDBOX", "CLAWLET_HOME"} <= set_here
    assert set_here - known == set()
    broken = load_compose()
    broken["services"]["control-plane-1"]["environment"]["CLAWLET_REDIS_URI"] = "redis://redis:6379/0"
    assert variables_set(broken, env_dir) - known == {"CLAWLET_REDIS_URI"}


# -- the files' settings, run for real ------------------------------------------------------------


def test_healthcheck_script(tmp_path: Path) -> None:
    closed = free_port()
    done = subprocess.run(
        [sys.executable, str(HEALTHCHECK), f"http://127.0.0.1:{closed}/health"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1 and "unhealthy" in done.stderr


#: where the balancer is in the compose network; the live test moves it to loopback
BALANCER = "haproxy:8080"


def wait_until(check: Callable[[], Any], what: str | Callable[[], str], timeout: float = DEADLINE) -> Any:
    """Poll ``check()`` until it returns something truthy; fail naming ``what`` (or what it returns
    then) after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, (
            f"timed out waiting for {what if isinstance(what, str) else what()}"
        )
        time.sleep(0.1)
    return result


def health(url: str) -> dict[str, Any] | None:
    try:
        response = httpx.get(f"{url}/health", timeout=10)
    except httpx.TransportError:
        return None
    return response.json() if response.status_code == 200 else None


class Process:
    """A ``python -m clawlet`` subprocess, its output in a log file."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.env = env
        self.log_path = log
        self.log = log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "clawlet", *args], env=env, stdout=self.log, stderr=subprocess.STDOUT
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(DEADLINE)
        self.log.close()


def compose_environment(service: dict[str, Any]) -> dict[str, str]:
    """A compose service's ``environment`` with ``${NAME:-default}`` resolved to the default."""
    return {
        name: re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(value))
        for name, value in service["environment"].items()
    }


class ControlPlane(Process):
    """``clawlet control-plane serve`` with a compose service's command and environment: a loopback
    address and a free port instead of 0.0.0.0:8100, the balancer at ``balancer``, and no Redis (each
    instance's in-process broker: the test needs none)."""

    def __init__(self, service: dict[str, Any], home: Path, balancer: str, shared: dict[str, str]) -> None:
        self.port = free_port()
        command = [str(arg).replace(BALANCER, balancer) for arg in service["command"]]
        command[command.index("--host") + 1] = "127.0.0.1"
        command[command.index("--port") + 1] = str(self.port)
        env = {**os.environ, **compose_environment(service), **shared, "CLAWLET_HOME": str(home)}
        env.pop("CLAWLET_REDIS_URL")
        home.mkdir(parents=True)
        super().__init__(command, env, home.parent / f"control-plane-{self.port}.log")
        self.url = f"http://127.0.0.1:{self.port}"

    def ready(self) -> dict[str, Any] | None:
        assert self.process.poll() is None, self.output()
        return health(self.url)

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "clawlet", "control-plane", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
            check=True,
        )
        return done.stdout


@pytest.fixture
def shared_database(tmp_path: Path) -> Iterator[str]:
    """The control planes' one database: PostgreSQL as in compose when the tests have one, else a
    SQLite file both use."""
    if postgres.SKIP_REASON:
        yield f"sqlite:///{tmp_path / 'controlplane.db'}"
        return
    with postgres.fresh_schema_url("clawlet_deploy") as url:
        yield url


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in reversed(started):
        process.close()


def haproxy_stat(sock: Path) -> list[dict[str, str]]:
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(str(sock))
        client.sendall(b"show stat\n")
        data = b""
        while chunk := client.recv(65536):
            data += chunk
    text = data.decode().lstrip("# ")
    return list(csv.DictReader(io.StringIO(text)))


def test_the_files_settings_against_real_control_planes_behind_real_haproxy(
    haproxy_binary: str, shared_database: str, processes: list[Process], tmp_path: Path
) -> None:
    """compose.yaml's control planes (their command, environment, one database and the JWT secret
    deploy/init-env makes) behind HAProxy running deploy/haproxy.cfg, with the balancer's name
    ``haproxy:8080`` moved to a loopback port in both; then an execution plane started as compose
    starts it, from vm-credentials without the ticket, fails over between the instances."""
    services = load_compose()["services"]
    port = free_port()
    balancer = f"127.0.0.1:{port}"
    secrets = {
        name: value
        for name, value in (
            line.split("=", 1)
            for line in (init_env(tmp_path / "env") / "control-plane.env").read_text().splitlines()
        )
    }
    shared = {
        "CLAWLET_CP_JWT_SECRET": secrets["CLAWLET_CP_JWT_SECRET"],
        "CLAWLET_CP_DATABASE_URL": shared_database,
    }
    planes = []
    for name in ("control-plane-1", "control-plane-2"):
        planes.append(ControlPlane(services[name], tmp_path / name / "home", balancer, shared))
        processes.append(planes[-1])
        wait_until(planes[-1].ready, f"{name} to start")  # one at a time: both migrate the database
    first, second = planes
    # HAProxy with deploy/haproxy.cfg, moved to loopback, and a stats socket to watch its checks
    sock = tmp_path / "haproxy.sock"
    config = HAPROXY_CFG.read_text(encoding="utf-8").replace(BALANCER, balancer)
    config = config.replace("bind :8080", f"bind {balancer}")
    config = config.replace("control-plane-1:8100", f"127.0.0.1:{first.port}")
    config = config.replace("control-plane-2:8100", f"127.0.0.1:{second.port}")
    config = config.replace("global\n", f"global\n    stats socket {sock} level admin\n", 1)
    (tmp_path / "haproxy.cfg").write_text(config)
    log = (tmp_path / "haproxy.log").open("wb")
    haproxy = subprocess.Popen(
        [haproxy_binary, "-db", "-f", str(tmp_path / "haproxy.cfg")], stdout=log, stderr=log
    )
    try:
        # every server of both backends passes the configured HTTP check (GET /health with the
        # balancer's Host)
        def checked() -> bool:
            assert haproxy.poll() is None, (tmp_path / "haproxy.log").read_text()
            rows = haproxy_stat(sock) if sock.exists() else []
            servers = [row for row in rows if row["svname"] not in ("FRONTEND", "BACKEND")]
            # a check answered with another status (the Host check's 421, say) will not change
            assert not any(row["check_status"] == "L7STS" for row in servers), servers
            return len(servers) == 4 and all(
                row["status"] == "UP" and row["check_status"] == "L7OK" for row in servers
            )

        wait_until(checked, "HAProxy's health checks")
        via = f"http://{balancer}"
        # a browser at the compose host's published port: allowed by CLAWLET_ALLOWED_HOSTS; others get 421
        answered = httpx.get(f"{via}/auth", headers={"Host": "localhost:8080"}, timeout=30)
        assert answered.status_code == 200 and answered.json()["required"] is True
        assert httpx.get(f"{via}/health", headers={"Host": "evil.example"}, timeout=30).status_code == 421
        assert httpx.get(f"{via}/haproxy-health", timeout=30).status_code == 200

        # the bootstrap: add-user, and vm-credentials without its one-time ticket, as the env file
        first.cli("add-user", "alice")
        lines = first.cli("vm-credentials", "alice").splitlines()
        credentials = dict(line.split("=", 1) for line in lines if not line.startswith("VM_TICKET="))
        assert set(credentials) == {"USER_ID", "VM_TOKEN", "CONTROL_PLANE_WS"}
        assert credentials["CONTROL_PLANE_WS"] == f"ws://{balancer}/ws/vm"  # the balancer, not an instance
        exec_service = services["exec-plane-alice"]
        home = tmp_path / "exec-alice"
        env = {**os.environ, **compose_environment(exec_service), **credentials, "CLAWLET_HOME": str(home)}
        command = [str(arg).replace("/var/lib/clawlet", str(home)) for arg in exec_service["command"]]
        processes.append(Process(command, env, tmp_path / "exec-plane.log"))

        # it holds its socket on one instance; that one dies; it reconnects through HAProxy to the
        # other with its VM token alone (the shared database and JWT secret)
        def holder() -> ControlPlane | None:
            counts = {plane: (health(plane.url) or {}).get("connected_exec_planes", 0) for plane in planes}
            return next((plane for plane, count in counts.items() if count == 1), None)

        holding = wait_until(holder, "the execution plane to connect through HAProxy")
        holding.process.kill()
        survivor = second if holding is first else first
        wait_until(
            lambda: (health(survivor.url) or {}).get("connected_exec_planes") == 1,
            lambda: f"the execution plane to reconnect to the other instance:\n{processes[-1].output()}",
            # its backoff (1, 2, 4, … 30 s) while HAProxy may still send it to the dead instance
            timeout=2 * DEADLINE,
        )
    finally:
        haproxy.kill()
        haproxy.wait(DEADLINE)
        log.close()
    # the Kubernetes probes' paths, as the kubelet asks them (Host: the pod's address and port)
    paths = {
        probe["httpGet"]["path"]
        for _, doc in k8s_documents()
        for container in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
        if container["image"].startswith(CLAWLET_IMAGE)
        for key, probe in container.items()
        if key.endswith("Probe") and "httpGet" in probe
    }
    assert paths
    for path in paths:
        assert httpx.get(f"{survivor.url}{path}", timeout=30).status_code == 200
    # the compose health check's command, with the image's script
    test = services["control-plane-1"]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "clawlet-healthcheck"]
    url = test[2].replace("8100", str(survivor.port))
    assert subprocess.run([sys.executable, str(HEALTHCHECK), url], timeout=60, check=False).returncode == 0

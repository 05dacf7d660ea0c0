"""The deployment files validate: compose against the Compose spec, manifests against Kubernetes."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SECRETS = {
    name: "x" * 16
    for name in (
        "POSTGRES_PASSWORD",
        "GITEA_ADMIN_PASSWORD",
        "MATTERMOST_ADMIN_PASSWORD",
        "SWARM_JOIN_TOKEN",
        "SWARM_OPERATOR_TOKEN",
    )
} | {"SWARM_TASK_DIR": "./examples/tasks/demo"}
VARIABLE = re.compile(r"\$\$|\$\{(\w+)(?:(:?[-?])([^}]*))?\}")


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """What `docker compose config` does with ${VAR}, ${VAR:-default}, ${VAR:?error} and $$."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.groups()
        if op and op.endswith("?") and not env.get(name):
            raise KeyError(f"{name}: {arg}")
        return env.get(name) or arg or ""

    out = VARIABLE.sub(one, value)
    return int(out) if out != value and out.isdigit() else out


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())  # type: ignore[no-any-return]


def test_compose_file_validates_against_the_compose_spec() -> None:
    compose_spec = pytest.importorskip("compose_spec")
    resolved = interpolate(compose(), SECRETS)
    parsed = compose_spec.PyCompose.from_json(json.dumps(resolved))
    parsed.validate()
    assert set(parsed.service_names()) >= {
        "postgres", "gitea", "mattermost", "bootstrap", "hub", "worker", "evaluator"
    }  # fmt: skip


def test_required_secrets_refuse_to_start_unset() -> None:
    for name in SECRETS:
        with pytest.raises(KeyError, match=name):
            interpolate(compose(), {k: v for k, v in SECRETS.items() if k != name})


def test_every_variable_is_documented_in_env_example() -> None:
    documented = set(re.findall(r"^(\w+)=", (ROOT / ".env.example").read_text(), re.M))
    for name in ("docker-compose.yml", "docker-compose.embedded.yml"):
        used = {m.group(1) for m in VARIABLE.finditer((ROOT / name).read_text())}
        assert used - {None} <= documented, name


def test_services_wait_for_what_they_need() -> None:
    services = compose()["services"]
    for name in ("postgres", "gitea", "mattermost", "hub"):
        assert "healthcheck" in services[name], name
    assert (
        services["hub"]["depends_on"]["bootstrap"]["condition"] == "service_completed_successfully"
    )
    assert services["worker"]["depends_on"]["hub"]["condition"] == "service_healthy"
    assert services["worker"]["deploy"]["replicas"] == "${SWARM_WORKER_CONTAINERS:-1}"
    env = services["mattermost"]["environment"]
    assert env["MM_RATELIMITSETTINGS_ENABLE"] == "false"
    assert int(env["MM_TEAMSETTINGS_MAXUSERSPERTEAM"]) >= 1024
    assert "GITEA__api__MAX_RESPONSE_ITEMS" in services["gitea"]["environment"]
    # hidden tests reach the evaluator only
    for name, service in services.items():
        mounts_task = any(":/task" in str(v) for v in service.get("volumes", []))
        assert (
            not mounts_task
            or name == "evaluator"
            or "/task/hidden:size=1m" in service.get("tmpfs", [])
        ), name
    # workers get model settings and keys; nobody else does
    for name, service in services.items():
        keys = {k for k in service.get("environment", {}) if k.endswith("_API_KEY")}
        assert not keys or name == "worker", name


def test_dockerfile_installs_only_what_the_package_declares() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = set(extras["optional-dependencies"])
    installs = re.findall(r"pip install[^\n]*", (ROOT / "infra" / "Dockerfile").read_text())
    assert installs, "the image installs the package"
    for line in installs:
        line = line.replace("$PIP_OPTIONS", "").split("&&")[0].rstrip(" \\")
        targets = [t for t in line.split()[2:] if not t.startswith("-")]
        assert len(targets) == 1 and re.fullmatch(r'"?\.\[([\w,]+)\]"?', targets[0]), line
        wanted = set(re.findall(r"\w+", targets[0].split("[")[1]))
        assert wanted <= declared, f"{wanted - declared} not in pyproject's extras"


MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_kubernetes_manifests_validate(path: Path) -> None:
    kv = pytest.importorskip("kubernetes_validate")
    for resource in yaml.safe_load_all(path.read_text()):
        if resource["kind"] == "Kustomization":
            assert all((path.parent / r).exists() for r in resource["resources"])
            continue
        kv.validate(resource, kv.latest_version(), strict=True)


def k8s(name: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((ROOT / "deploy/kubernetes" / name).read_text()))


def pod_specs() -> dict[str, dict[str, Any]]:
    specs = {}
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc["kind"] in ("Deployment", "Job", "StatefulSet"):
                specs[doc["metadata"]["name"]] = doc["spec"]["template"]["spec"]
    return specs


def test_kubernetes_pods_are_locked_down_and_limited() -> None:
    specs = pod_specs()
    assert set(specs) == {"swarm-bootstrap", "swarm-hub", "swarm-worker", "swarm-evaluator"}
    for name, spec in specs.items():
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        for container in spec["containers"]:
            locked = container["securityContext"]
            assert locked["readOnlyRootFilesystem"] is True, name
            assert locked["allowPrivilegeEscalation"] is False, name
            assert locked["capabilities"] == {"drop": ["ALL"]}, name
            assert "privileged" not in locked, name
            assert {"cpu", "memory"} <= set(container["resources"]["limits"]), name


def test_kubernetes_runs_the_compose_commands() -> None:
    services = compose()["services"]
    specs = pod_specs()
    for service, name in (("hub", "swarm-hub"), ("worker", "swarm-worker"),
                          ("evaluator", "swarm-evaluator")):  # fmt: skip
        composed = " ".join(services[service]["command"]).replace("$$", "$").replace("{", "")
        composed = composed.replace("}", "")
        assert " ".join(specs[name]["containers"][0]["args"]) == composed, name
    bootstrap = specs["swarm-bootstrap"]["containers"][0]["command"]
    assert bootstrap == services["bootstrap"]["entrypoint"]


def test_kubernetes_network_policy_isolates_workers_and_the_evaluator() -> None:
    policies = {d["metadata"]["name"]: d["spec"] for d in k8s("networkpolicy.yaml")}
    assert policies["swarm-worker"]["ingress"] == [] == policies["swarm-evaluator"]["ingress"]
    worker_to = [
        peer.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/component")
        for rule in policies["swarm-worker"]["egress"]
        for peer in rule["to"]
    ]
    assert "hub" in worker_to and "evaluator" not in worker_to
    public = [p["ipBlock"] for r in policies["swarm-worker"]["egress"] for p in r["to"]
              if "ipBlock" in p]  # fmt: skip
    assert public and all("10.0.0.0/8" in b["except"] for b in public)
    resources = k8s("kustomization.yaml")[0]["resources"]
    assert "networkpolicy.yaml" in resources and "bootstrap.yaml" in resources

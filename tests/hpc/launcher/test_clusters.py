from pathlib import Path

import pytest

from hpc.errors import UsageError
from hpc.launcher.clusters import load_registry

REQUIRED = {"vista", "lonestar6", "jureca", "jupiter", "juwels_booster", "local"}


@pytest.fixture(scope="module")
def registry():
    return load_registry()


def test_registry_ships_every_supported_cluster(registry):
    assert REQUIRED <= set(registry.names)


def test_registry_records_the_hardware_the_issue_names(registry):
    vista, jureca = registry.get("vista"), registry.get("jureca")
    assert (vista.gpu_memory_gb, vista.cpu_arch) == (96, "aarch64")
    assert jureca.gpu_memory_gb == 94 and not jureca.internet
    assert registry.get("lonestar6").gpu_memory_gb == 40
    assert registry.get("juwels_booster").gpu_memory_gb == 40
    assert registry.get("jupiter").cpu_arch == "aarch64"


def test_the_clusters_that_charge_whole_nodes_say_so(registry):
    whole = {name for name, cluster in registry.clusters.items() if cluster.whole_nodes}
    assert whole == {"vista", "lonestar6", "jureca", "jupiter", "juwels_booster"}


def test_every_cluster_has_its_template_and_dotenv_file(registry):
    repo = Path(__file__).resolve().parents[3]
    for cluster in registry.clusters.values():
        assert (repo / "sbatch" / cluster.template).is_file(), cluster.name
        assert (repo / "dotenv" / cluster.dotenv).is_file(), cluster.name


@pytest.mark.parametrize(
    "hostname, expected",
    [
        ("login1.vista.tacc.utexas.edu", "vista"),
        ("login2.ls6.tacc.utexas.edu", "lonestar6"),
        ("jrlogin05.jureca", "jureca"),
        ("jwlogin22.juwels", "juwels_booster"),
        ("LOGIN1.VISTA.TACC.UTEXAS.EDU", "vista"),
    ],
)
def test_hostname_selects_its_cluster(registry, hostname, expected):
    detection = registry.detect(hostname=hostname)
    assert detection.cluster.name == expected
    assert hostname in detection.reason


def test_unknown_host_falls_back_to_local_and_says_so(registry):
    detection = registry.detect(hostname="my-laptop")
    assert detection.cluster.name == "local"
    assert "falling back" in detection.reason


def test_hpc_hostname_overrides_the_machine_hostname(registry, monkeypatch):
    monkeypatch.setenv("HPC_HOSTNAME", "login3.vista.tacc.utexas.edu")
    detection = registry.detect()
    assert detection.cluster.name == "vista"
    assert "HPC_HOSTNAME" in detection.reason


def test_cluster_flag_overrides_detection(registry, monkeypatch):
    monkeypatch.setenv("HPC_HOSTNAME", "login3.vista.tacc.utexas.edu")
    assert registry.detect("jureca").cluster.name == "jureca"


def test_unknown_cluster_lists_the_known_ones(registry):
    with pytest.raises(UsageError, match="known clusters: vista, lonestar6"):
        registry.get("frontier")


def test_a_new_cluster_is_one_yaml_entry(tmp_path):
    text = (Path(__file__).resolve().parents[3] / "hpc" / "launcher" / "clusters.yaml").read_text()
    text += """
  mycluster:
    hostnames: ["*.my.edu"]
    template: base.sbatch.j2
    partition: gpu
    account_var: MY_ACCOUNT
    gpus_per_node: 8
    gpu_memory_gb: 80
    cpus_per_task: 16
    gpu_gres: gres
    cpu_arch: x86_64
    max_time: "2-00:00:00"
    max_nodes: 4
    internet: true
    requeue: true
    whole_nodes: false
    modules: []
    dotenv: mycluster.env
"""
    path = tmp_path / "clusters.yaml"
    path.write_text(text)
    registry = load_registry(path)
    assert registry.detect(hostname="login.my.edu").cluster.gpus_per_node == 8


def test_a_registry_entry_missing_a_field_is_named(tmp_path):
    path = tmp_path / "clusters.yaml"
    path.write_text("clusters:\n  local:\n    hostnames: []\n")
    with pytest.raises(ValueError, match="cluster 'local': missing field"):
        load_registry(path)

"""Packing arithmetic and the GPU-use line (hpc/launcher/packing.py)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpc.errors import UsageError
from hpc.launcher import packing
from hpc.launcher.clusters import load_registry

REGISTRY = load_registry()


def cluster(name: str):
    return REGISTRY.clusters[name]


@pytest.mark.parametrize("name, per_run, judge, expected", [
    ("jureca", 1, 0, 4),          # 4 GPUs charged whole: 4 shared-mode runs per node
    ("jureca", 2, 0, 2),          # dedicated mode: 2 runs of 2 GPUs
    ("jureca", 1, 1, 3),          # a judge on one GPU, 3 runs beside it
    ("juwels_booster", 2, 0, 2),
    ("lonestar6", 1, 0, 3),
    ("lonestar6", 2, 0, 1),       # 3 GPUs hold one dedicated run: the third GPU idles
    ("vista", 1, 0, 1),           # one GPU per node: nothing to pack
    ("local", 1, 0, 1),           # GPUs charged as asked: auto does not pack
])
def test_auto_packs_as_many_runs_as_fit_where_nodes_are_charged_whole(name, per_run, judge, expected):
    assert packing.runs_per_job("auto", cluster(name), per_run, judge) == expected


def test_an_explicit_pack_size_packs_anywhere_it_fits():
    assert packing.runs_per_job(2, cluster("local"), 1, 0) == 2
    assert packing.runs_per_job("off", cluster("jureca"), 1, 0) == 1
    with pytest.raises(UsageError, match="invalid --pack 3: a local node has 2 GPUs, which hold at most 2"):
        packing.runs_per_job(3, cluster("local"), 1, 0)
    with pytest.raises(UsageError, match="beside a judge on 1"):
        packing.runs_per_job(4, cluster("jureca"), 1, 1)


def test_a_judge_that_leaves_no_gpu_for_a_run_is_refused():
    with pytest.raises(UsageError, match="the judge 3, but a lonestar6 node has 3"):
        packing.runs_per_job("auto", cluster("lonestar6"), 1, 3)


@pytest.mark.parametrize("text, expected", [("auto", "auto"), ("off", "off"), ("1", 1), ("4", 4)])
def test_pack_takes_auto_off_or_a_count(text, expected):
    assert packing.parse_pack(text) == expected


@pytest.mark.parametrize("text", ["0", "-1", "two", "", "2.5"])
def test_a_bad_pack_is_one_line_naming_it(text):
    with pytest.raises(UsageError, match=f"invalid --pack {text!r}: accepted auto, off"):
        packing.parse_pack(text)


def test_the_gpu_line_says_what_each_gpu_of_a_run_does():
    shared = packing.GpuUse(1, 1, 0, 4, True, "shared")
    assert packing.describe(shared, ["r"]).endswith("GPU 0: r (training and vLLM); 3 idle")
    dedicated = packing.GpuUse(2, 2, 0, 4, True, "dedicated")
    assert packing.describe(dedicated, ["a", "b"]) == (
        "4 charged (4-GPU nodes are charged whole); 4 used; GPU 0: a training; GPU 1: a vLLM; "
        "GPU 2: b training; GPU 3: b vLLM")


def test_the_gpu_line_says_what_is_charged_and_which_gpu_does_what():
    use = packing.GpuUse(runs=3, gpus_per_run=1, judge_gpus=1, gpus_per_node=4, whole_nodes=True)
    assert packing.describe(use, ["a", "b", "c"]) == (
        "4 charged (4-GPU nodes are charged whole); 4 used; GPU 0: a; GPU 1: b; GPU 2: c; GPU 3: judge")
    alone = packing.GpuUse(runs=1, gpus_per_run=2, judge_gpus=0, gpus_per_node=3, whole_nodes=True)
    assert packing.describe(alone, ["r"]) == "3 charged (3-GPU nodes are charged whole); 2 used; GPU 0,1: r; 1 idle"
    gres = packing.GpuUse(runs=1, gpus_per_run=1, judge_gpus=0, gpus_per_node=2, whole_nodes=False)
    assert packing.describe(gres, ["r"]) == "1 charged; 1 used; GPU 0: r"


@given(st.integers(1, 8), st.integers(1, 4), st.integers(0, 3), st.integers(1, 40))
def test_packs_never_overlap_gpus_and_use_at_most_a_node(node_gpus, per_run, judge, runs):
    from dataclasses import replace

    node = replace(cluster("jureca"), gpus_per_node=node_gpus)
    try:
        per_job = packing.runs_per_job("auto", node, per_run, judge)
    except UsageError:
        assert per_run + judge > node_gpus
        return
    groups = packing.group(list(range(runs)), per_job)
    assert sum(len(g) for g in groups) == runs and all(1 <= len(g) <= per_job for g in groups)
    use = packing.GpuUse(per_job, per_run, judge, node_gpus, True)
    devices = [d for slot in range(per_job) for d in use.run_devices(slot)] + use.judge_devices()
    assert len(devices) == len(set(devices)) == use.requested <= node_gpus
    assert node_gpus - use.requested < per_run  # no room left for another run


def test_the_packing_table_of_the_docs_is_what_the_code_says():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[3] / "docs" / "sweeps.md").read_text()
    start, end = "<!-- packing table: start -->\n", "<!-- packing table: end -->"
    assert start in readme, "docs/sweeps.md lacks the packing table markers"
    shown = readme.split(start, 1)[1].split(end, 1)[0]
    assert shown == packing.table(REGISTRY) + "\n", "refresh it with: python -m hpc.launcher.packing"

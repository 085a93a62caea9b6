"""hpc.slurm.output: the parsers read what Slurm prints.

Two sources. Outputs recorded from the local Slurm 22.05.8 by tests/hpc/slurm/record_outputs.py
(tests/fixtures/slurm/22.05.8/: the exact commands of hpc/slurm/calls.py over jobs it brought
into each state; jobs.json says which job played which part). And the formats of newer
releases (23.02 to 24.11), written out below from their documentation and release notes
where they differ from 22.05: typed GPUs in AllocTRES, ``None`` for a time never reached,
states 22.05 here cannot produce (OUT_OF_MEMORY, PREEMPTED, NODE_FAIL, DEADLINE), job arrays
and heterogeneous jobs, new fields of ``scontrol show job``.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from hpc.slurm.output import (
    FS,
    RS,
    latest_states,
    parse_ended,
    parse_queue,
    parse_runs,
    parse_show_job,
    parse_submitted,
    sacct_records,
    squeue_records,
    tres_gpus,
)
from hpc.slurm.states import JobState

RECORDED = Path(__file__).resolve().parents[2] / "fixtures" / "slurm" / "22.05.8"
META = json.loads((RECORDED / "jobs.json").read_text())
JOBS: dict[str, str] = META["jobs"]
ODD_NAME: str = META["odd_name"]


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


# -- recorded from Slurm 22.05.8 ------------------------------------------------------------------


def test_the_recording_is_of_slurm_22_05() -> None:
    assert META["version"] == "slurm-wlm 22.05.8"


def test_squeue_gives_each_job_with_its_state_reason_times_and_a_name_holding_a_newline() -> None:
    jobs = {job.job_id: job for job in parse_queue(recorded("squeue_running.txt"))}
    odd = jobs[JOBS["odd_name"]]
    assert odd.state is JobState.RUNNING and odd.name == ODD_NAME and odd.nodelist in ("n1", "n2")
    assert odd.limit_seconds == 120 and odd.elapsed_seconds is not None and odd.elapsed_seconds >= 0
    later = jobs[JOBS["later"]]
    assert later.state is JobState.PENDING and later.reason == "BeginTime" and later.nodelist == ""
    assert jobs[JOBS["pending_cancelled"]].reason == "Dependency"
    assert jobs[JOBS["timeout"]].limit_seconds == 60
    assert {f"{JOBS['array']}_0", f"{JOBS['array']}_1"} <= set(jobs) or f"{JOBS['array']}_[0-1]" in jobs


def test_scontrol_show_job_of_a_running_job_gives_its_end_restarts_and_log_paths_with_space_and_newline() -> None:
    shown = parse_show_job(recorded("scontrol_show_job_running.txt"))
    assert shown is not None and shown.job_id == JOBS["odd_name"] and shown.state is JobState.RUNNING
    assert shown.fields["JobName"] == ODD_NAME and shown.restarts == 0
    start = datetime.fromisoformat(shown.fields["StartTime"]).replace(tzinfo=timezone.utc)
    assert shown.end_time == start + timedelta(minutes=2)  # --time=2
    assert shown.std_out.endswith(f"/logs with space/{ODD_NAME}-{JOBS['odd_name']}.out")
    assert shown.std_err.endswith(f"/logs with space/{ODD_NAME}-{JOBS['odd_name']}.err")


def test_scontrol_show_job_of_a_job_waiting_for_its_begin_time_gives_the_planned_end() -> None:
    shown = parse_show_job(recorded("scontrol_show_job_pending.txt"))
    assert shown is not None and shown.state is JobState.PENDING and shown.fields["Reason"] == "BeginTime"
    submitted = datetime.fromisoformat(shown.fields["SubmitTime"]).replace(tzinfo=timezone.utc)
    assert shown.end_time is not None and shown.end_time - submitted >= timedelta(hours=2)  # --begin=now+2hours


def test_scontrol_show_job_of_an_array_reads_its_first_record() -> None:
    shown = parse_show_job(recorded("scontrol_show_job_array.txt"))
    assert shown is not None and shown.fields["ArrayJobId"] == JOBS["array"]
    assert shown.fields["ArrayTaskId"] in ("0", "1", "0-1")  # tasks not started yet are one record


def test_sbatch_parsable_prints_the_job_id() -> None:
    assert parse_submitted(recorded("sbatch_parsable.txt")).isdigit()


def test_a_job_slurmctld_does_not_know_is_an_error_on_stderr() -> None:
    assert "Invalid job id specified" in recorded("scontrol_show_job_unknown.stderr")
    assert "Invalid job id specified" in recorded("squeue_one_job_gone.stderr")
    assert parse_show_job("") is None


def runs_by_job() -> dict[str, list]:
    found: dict[str, list] = {}
    for row in parse_runs(recorded("sacct_runs.txt")):
        found.setdefault(row.job_id, []).append(row)
    return found


def test_sacct_gives_every_run_of_every_job_with_its_final_state() -> None:
    runs = runs_by_job()
    final = {part: runs[JOBS[part]][-1].state for part in
             ("completed", "failed", "gpus", "odd_name", "running_cancelled", "pending_cancelled", "timeout")}
    assert final == {"completed": JobState.COMPLETED, "failed": JobState.FAILED, "gpus": JobState.COMPLETED,
                     "odd_name": JobState.COMPLETED, "running_cancelled": JobState.CANCELLED,
                     "pending_cancelled": JobState.CANCELLED, "timeout": JobState.TIMEOUT}
    assert [r.state for r in runs[f"{JOBS['array']}_0"]] == [JobState.COMPLETED]


def test_a_requeued_job_has_a_row_per_run_the_requeued_one_first() -> None:
    rows = runs_by_job()[JOBS["requeued"]]  # sacct printed the second run after the other jobs' rows
    assert [r.state for r in rows] == [JobState.REQUEUED, JobState.COMPLETED]
    assert rows[0].end is not None and rows[1].start is not None and rows[0].end <= rows[1].start


def test_sacct_times_elapsed_nodes_and_gpus_are_typed() -> None:
    runs = runs_by_job()
    done = runs[JOBS["completed"]][-1]
    assert done.start is not None and done.end is not None and done.submit is not None and done.eligible is not None
    assert done.start.tzinfo is timezone.utc and done.elapsed == (done.end - done.start).total_seconds()
    assert done.nodes == 1 and done.gpus == 0 and runs[JOBS["gpus"]][-1].gpus == 2
    assert runs[JOBS["timeout"]][-1].elapsed >= 60
    never = runs[JOBS["pending_cancelled"]][-1]
    assert never.start is None and never.end is not None and never.elapsed == 0


def test_the_ended_jobs_view_keeps_a_name_with_a_newline_exit_codes_and_submit_lines() -> None:
    jobs = {job.job_id: job for job in parse_ended(recorded("sacct_ended.txt"))}
    odd = jobs[JOBS["odd_name"]]
    assert odd.name == ODD_NAME and odd.state is JobState.COMPLETED and odd.exit_code == "0:0"
    failed = jobs[JOBS["failed"]]
    assert failed.state is JobState.FAILED and failed.exit_code == "3:0" and failed.end is not None
    assert "--wrap" in failed.submit_line and failed.workdir and failed.user
    assert jobs[JOBS["running_cancelled"]].state is JobState.CANCELLED
    assert {f"{JOBS['array']}_0", f"{JOBS['array']}_1"} <= set(jobs)
    assert all(jobs[f"{JOBS['array']}_{task}"].job_id_raw.isdigit() for task in (0, 1))
    assert all(job.elapsed_seconds is not None for job in jobs.values())


# -- newer releases (23.02 - 24.11), from their documented formats ----------------------------------------


def sacct_text(rows: list[list[str]]) -> str:
    return "".join(FS.join(row) + "\n" for row in rows)


NEWER_RUNS = sacct_text([
    # 23.02+: a typed GPU count beside the untyped one in AllocTRES
    ["901", "COMPLETED", "2024-05-01T10:00:00", "2024-05-01T10:00:00", "2024-05-01T10:00:05", "2024-05-01T12:00:05",
     "7200", "2", "billing=16,cpu=16,gres/gpu:h100=8,gres/gpu=8,mem=128G,node=2"],
    ["902", "OUT_OF_MEMORY", "2024-05-01T10:00:00", "2024-05-01T10:00:00", "2024-05-01T10:01:00",
     "2024-05-01T10:02:00", "60", "1", "cpu=8,gres/gpu=4,mem=64G,node=1"],
    ["903", "PREEMPTED", "2024-05-01T10:00:00", "2024-05-01T10:00:00", "2024-05-01T10:00:00", "2024-05-01T10:30:00",
     "1800", "1", "cpu=8,gres/gpu=4,node=1"],
    # a job cancelled while it waited: 23.02+ print None for the start it never had
    ["904", "CANCELLED by 12345", "2024-05-01T10:00:00", "2024-05-01T10:00:00", "None", "2024-05-01T10:05:00",
     "0", "1", ""],
    ["905", "RUNNING", "2024-05-01T10:00:00", "2024-05-01T10:00:00", "2024-05-01T10:00:00", "Unknown", "300", "1",
     "cpu=1,node=1"],
    ["906_[2-5%2]", "PENDING", "2024-05-01T10:00:00", "Unknown", "Unknown", "Unknown", "0", "1", ""],
    ["907+1", "NODE_FAIL", "2024-05-01T10:00:00", "2024-05-01T10:00:00", "2024-05-01T10:00:00", "2024-05-01T11:00:00",
     "3600", "1", "cpu=1,node=1"],
    ["908", "DEADLINE", "2024-05-01T10:00:00", "2024-05-01T10:00:00", "2024-05-01T10:00:00", "2024-05-01T11:00:00",
     "3600", "1", "cpu=1,node=1"],
])


def test_newer_sacct_rows_read_with_their_states_gpus_and_missing_times() -> None:
    rows = {row.job_id: row for row in parse_runs(NEWER_RUNS)}
    assert rows["901"].gpus == 8 and rows["901"].nodes == 2 and rows["901"].elapsed == 7200
    assert rows["902"].state is JobState.OUT_OF_MEMORY and rows["902"].gpus == 4
    assert rows["903"].state is JobState.PREEMPTED
    assert rows["904"].state is JobState.CANCELLED and rows["904"].start is None and rows["904"].end is not None
    assert rows["905"].end is None and rows["905"].state is JobState.RUNNING
    assert rows["906_[2-5%2]"].start is None and rows["906_[2-5%2]"].eligible is None
    assert rows["907+1"].state is JobState.NODE_FAIL and rows["908"].state is JobState.DEADLINE


def test_the_latest_run_of_each_job_gives_its_state_and_unknown_times_are_none() -> None:
    text = sacct_text([
        ["59", "REQUEUED", "2026-11-25T08:46:00", "2026-11-25T08:46:00", "2026-11-25T08:46:00", "2026-11-25T08:46:05",
         "5", "1", "billing=1,cpu=1,gres/gpu=1,mem=1G,node=1"],
        ["59", "PENDING", "2026-11-25T08:46:05", "2026-11-25T08:46:36", "Unknown", "Unknown", "0", "1", ""],
        ["60", "CANCELLED by 0", "2026-11-25T08:47:00", "2026-11-25T08:47:00", "2026-11-25T08:47:01",
         "2026-11-25T08:49:01", "120", "2", "cpu=4,gres/gpu=4,node=2"],
    ])
    first, pending, third = parse_runs(text)
    assert (first.job_id, first.state, first.elapsed, first.nodes, first.gpus) == ("59", JobState.REQUEUED, 5, 1, 1)
    assert first.end is not None and first.start is not None and first.end - first.start == timedelta(seconds=5)
    assert (pending.start, pending.end, pending.gpus) == (None, None, 0)
    assert (third.state, third.gpus, third.nodes) == (JobState.CANCELLED, 4, 2)
    assert latest_states([pending, third, first]) == {"59": JobState.PENDING, "60": JobState.CANCELLED}


def test_a_row_with_the_wrong_number_of_fields_is_skipped_and_the_next_one_read() -> None:
    text = "broken" + FS + "row\n" + NEWER_RUNS
    assert [r.job_id for r in parse_runs(text)][-1] == "908"


@pytest.mark.parametrize("tres, gpus", [
    ("billing=2,cpu=2,gres/gpu=4,mem=2G,node=2", 4), ("gres/gpu:a100=2,gres/gpu=2", 2), ("cpu=1,node=1", 0),
    ("", 0), ("gres/gpu=", 0),
])
def test_gpus_are_the_untyped_gres_gpu_count(tres: str, gpus: int) -> None:
    assert tres_gpus(tres) == gpus


NEWER_SHOW_JOB = """JobId=5001 JobName=train run
   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A
   Priority=1 Nice=0 Account=proj QOS=normal
   JobState=COMPLETING Reason=None Dependency=(null)
   Requeue=1 Restarts=2 BatchFlag=1 Reboot=0 ExitCode=0:15
   RunTime=00:10:00 TimeLimit=2-00:00:00 TimeMin=N/A
   SubmitTime=2024-05-01T10:00:00 EligibleTime=2024-05-01T10:00:00
   AccrueTime=2024-05-01T10:00:00
   StartTime=2024-05-01T10:00:00 EndTime=2024-05-03T10:00:00 Deadline=N/A
   SuspendTime=None SecsPreSuspend=0 LastSchedEval=2024-05-01T10:00:00 Scheduler=Main
   Partition=gpu AllocNode:Sid=login1:4242
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=g[001-002]
   BatchHost=g001
   NumNodes=2 NumCPUs=64 NumTasks=2 CPUs/Task=32 ReqB:S:C:T=0:0:*:*
   ReqTRES=cpu=64,mem=256G,node=2,billing=64,gres/gpu=8
   AllocTRES=cpu=64,mem=256G,node=2,billing=64,gres/gpu=8,gres/gpu:h100=8
   Socks/Node=* NtasksPerN:B:S:C=1:0:*:* CoreSpec=*
   MinCPUsNode=32 MinMemoryNode=128G MinTmpDiskNode=0
   Features=(null) DelayBoot=00:00:00
   OverSubscribe=NO Contiguous=0 Licenses=(null) Network=(null)
   Command=/home/alice/runs/train run/scripts/job.sbatch
   WorkDir=/home/alice/repo
   AdminComment=checked by ops
   StdErr=/home/alice/runs/train run/logs/train run-5001.err
   StdIn=/dev/null
   StdOut=/home/alice/runs/train run/logs/train run-5001.out
   TresPerNode=gres/gpu:4
   MailUser=alice MailType=INVALID_DEPEND

"""


def test_newer_scontrol_fields_do_not_disturb_the_ones_read() -> None:
    shown = parse_show_job(NEWER_SHOW_JOB)
    assert shown is not None and shown.job_id == "5001" and shown.fields["JobName"] == "train run"
    assert shown.state is JobState.COMPLETING and shown.restarts == 2
    assert shown.end_time == datetime(2024, 5, 3, 10, tzinfo=timezone.utc)
    assert shown.std_out == "/home/alice/runs/train run/logs/train run-5001.out"
    assert shown.fields["AdminComment"] == "checked by ops" and shown.fields["TresPerNode"] == "gres/gpu:4"


def test_scontrol_show_job_in_one_line_reads_the_same_fields() -> None:
    one_line = ("JobId=45 JobName=wrap UserId=root(0) GroupId=root(0) JobState=RUNNING Reason=None Requeue=1 "
                "Restarts=3 RunTime=00:00:02 TimeLimit=00:02:00 StartTime=2026-11-25T08:44:36 "
                "EndTime=2026-11-25T08:46:36 Deadline=N/A NodeList=n1")
    shown = parse_show_job(one_line)
    assert shown is not None and shown.restarts == 3
    assert shown.end_time == datetime(2026, 11, 25, 8, 46, 36, tzinfo=timezone.utc)


@pytest.mark.parametrize("end", ["Unknown", "None", "N/A"])
def test_an_end_slurm_does_not_know_is_none(end: str) -> None:
    shown = parse_show_job(NEWER_SHOW_JOB.replace("EndTime=2024-05-03T10:00:00", f"EndTime={end}"))
    assert shown is not None and shown.end_time is None


def test_a_job_name_cannot_fake_a_field_printed_after_it() -> None:
    text = ("JobId=64 JobName=x\n   StdOut=/fake\n   EndTime=2099-01-01T00:00:00\n   UserId=root(0)\n"
            "   StartTime=2026-11-25T08:44:36 EndTime=2026-11-25T08:46:36\n"
            "   StdErr=/runs/a b\nz/logs/x-64.err\n   StdIn=/dev/null\n   StdOut=/runs/a b\nz/logs/x-64.out\n"
            "   Power=\n\n")
    shown = parse_show_job(text)
    assert shown is not None
    assert (shown.std_out, shown.std_err) == ("/runs/a b\nz/logs/x-64.out", "/runs/a b\nz/logs/x-64.err")
    assert shown.end_time == datetime(2026, 11, 25, 8, 46, 36, tzinfo=timezone.utc)


def test_newer_squeue_records_read_arrays_heterogeneous_jobs_and_long_limits() -> None:
    text = "".join(FS.join(fields) + RS + "\n" for fields in [
        ["906_[2-5%2]", "PENDING", "JobArrayTaskLimit", "0:00", "1-00:00:00", "1", "", "sweep"],
        ["907+0", "RUNNING", "None", "3-04:05:06", "UNLIMITED", "2", "g[001-002]", "het | job"],
        ["908", "OUT_OF_MEMORY", "OutOfMemory", "1:00", "Partition_Limit", "1", "g003", "oom"],
    ])
    jobs = parse_queue(text)
    assert [j.job_id for j in jobs] == ["906_[2-5%2]", "907+0", "908"]
    assert jobs[0].limit_seconds == 86400 and jobs[1].elapsed_seconds == 3 * 86400 + 4 * 3600 + 5 * 60 + 6
    assert jobs[1].limit_seconds is None and jobs[1].name == "het | job" and jobs[2].state is JobState.OUT_OF_MEMORY


def test_newer_ended_jobs_read_array_tasks_and_steps_ids_as_printed() -> None:
    fields = ["JobID", "JobIDRaw", "State", "ExitCode", "Elapsed", "End", "User", "WorkDir", "SubmitLine", "JobName"]
    text = sacct_text([
        ["906_3", "910", "OUT_OF_MEMORY", "0:125", "00:01:00", "2024-05-01T10:02:00", "alice", "/w", "sbatch a.sh", "a"],
        ["907+1", "912", "PREEMPTED", "0:0", "1-00:00:00", "2024-05-02T10:00:00", "alice", "/w", "sbatch --wrap x", "b"],
        ["908", "908", "CANCELLED by 0", "0:0", "00:00:00", "Unknown", "alice", "/w", "", "c\nd"],
    ])
    assert len(fields) == 10
    jobs = parse_ended(text)
    assert [(j.job_id, j.job_id_raw, j.state) for j in jobs] == [
        ("906_3", "910", JobState.OUT_OF_MEMORY), ("907+1", "912", JobState.PREEMPTED), ("908", "908", JobState.CANCELLED)]
    assert jobs[1].elapsed_seconds == 86400 and jobs[2].end is None and jobs[2].name == "c\nd"


@pytest.mark.parametrize("text, job_id", [("258\n", "258"), ("258;cluster_b\n", "258")])
def test_sbatch_parsable_with_and_without_a_cluster(text: str, job_id: str) -> None:
    assert parse_submitted(text) == job_id


@pytest.mark.parametrize("text", ["", "sbatch: error: Batch job submission failed\n", "Submitted batch job 5\n"])
def test_no_job_id_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_submitted(text)


# -- the record splitters ----------------------------------------------------------------------------------


def test_sacct_records_keep_every_record_including_the_last() -> None:
    text = sacct_text([["1", "COMPLETED", "a"], ["2", "FAILED", "b"]])
    assert sacct_records(text, 3) == [["1", "COMPLETED", "a"], ["2", "FAILED", "b"]]
    assert sacct_records(sacct_text([["7", "FAILED", "only"]]), 3) == [["7", "FAILED", "only"]]
    assert sacct_records("", 3) == []


def test_sacct_records_keep_a_name_with_newlines_pipes_and_spaces_in_one_record() -> None:
    odd = "x 'y' |z\nsecond line\n"
    text = sacct_text([["1", "FAILED", odd], ["2", "FAILED", "plain"], ["3", "FAILED", odd]])
    assert sacct_records(text, 3) == [["1", "FAILED", odd], ["2", "FAILED", "plain"], ["3", "FAILED", odd]]


def test_squeue_records_split_on_the_record_separator_not_on_newlines() -> None:
    text = f"1{FS}RUNNING{FS}a\nb{RS}\n2{FS}PENDING{FS}c|d e{RS}\n"
    assert squeue_records(text, 3) == [["1", "RUNNING", "a\nb"], ["2", "PENDING", "c|d e"]]

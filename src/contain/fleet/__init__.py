"""contain fleet: batches of sandboxed jobs across a Ray cluster (the optional ``fleet`` extra).

Importing this package does not import Ray: only ``ray_nodes`` and ``local_cluster`` do, inside
their functions. See docs/fleet.md for what the fleet guarantees and what it does not.
"""

from contain.fleet.batch import Batch, run_batch
from contain.fleet.jobs import InputFile, Job, JobProblem, PreparedJob, prepare_jobs, read_job_lines
from contain.fleet.local_cluster import LocalCluster
from contain.fleet.messages import CancelReport, JobOutcome, JobReport, JobSpec, NodeDescription
from contain.fleet.ray_nodes import Dispatcher, RayDispatcher, connect
from contain.fleet.session import FleetSession
from contain.fleet.summary import BatchSummary, summarize

__all__ = [
    "Batch",
    "BatchSummary",
    "CancelReport",
    "Dispatcher",
    "FleetSession",
    "InputFile",
    "Job",
    "JobOutcome",
    "JobProblem",
    "JobReport",
    "JobSpec",
    "LocalCluster",
    "NodeDescription",
    "PreparedJob",
    "RayDispatcher",
    "connect",
    "prepare_jobs",
    "read_job_lines",
    "run_batch",
    "summarize",
]

"""Review a job before it runs: read the config a team already has (a torchtitan TOML or command
line, a Megatron-LM launch script, a DeepSpeed JSON, a ``vllm serve`` or SGLang line), say whether
it fits, how fast it runs and with what band, what dominates, and which changes its engine can run
that would help most, exported in the same format.

    from partitioner import cluster, review
    job = review.read_job(open("llama3_8b.toml").read(), "llama3_8b.toml", devices=64)
    rv = review.review_job(cluster.profile(graph), job, cluster.cluster("a100-80gb"))
    rv.fits, rv.result.step_s, [c.result.layout.label() for c in rv.changes]

Torch-free: the model comes as the planner's profile (:func:`partitioner.cluster.profile`).
"""

from __future__ import annotations

from partitioner.review.export import job_file
from partitioner.review.job import FORMATS, Job, JobError, Setting
from partitioner.review.read import detect_format, read_job
from partitioner.review.review import Change, Review, expressible, review_job

__all__ = [
    "FORMATS",
    "Job",
    "JobError",
    "Setting",
    "read_job",
    "detect_format",
    "review_job",
    "Review",
    "Change",
    "expressible",
    "job_file",
]

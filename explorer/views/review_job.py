"""*Review a job* on the Plan a cluster page: upload or paste the config a team is about to launch
(a torchtitan TOML or command line, a Megatron-LM launch script, a DeepSpeed JSON, a ``vllm serve``
or SGLang line) and read what the command line's ``review`` prints: every setting and where it came
from, whether it fits each GPU, its step or tokens a second with the band, what dominates, and the
changes its engine can run on the same GPUs, each downloadable in the job's own format. The job is
read (a script is never run) and priced on the sidebar's model; a job that names another model
says which to choose."""

from __future__ import annotations

from typing import Any

import streamlit as st

from explorer.builders.text import md
from explorer.cluster_inputs import hardware_cluster
from partitioner import cluster, review
from partitioner.review.read import MAX_JOB_BYTES
from partitioner.review.report import (
    FORMAT_NAMES,
    MAX_LISTED,
    change_line,
    dominant_line,
    memory_line,
    speed_line,
    verdict,
)

__all__ = ["render"]


def _model_name(label: str) -> str:
    return label.split("(", 1)[0]


def _job_text() -> tuple[str, str]:
    upload = st.file_uploader(
        "A job config (torchtitan .toml, DeepSpeed .json, a launch script)",
        type=["toml", "json", "sh", "txt"],
        key="rv_file",
    )
    pasted = st.text_area("or paste it (a file's text, or the launch command line)", key="rv_text", height=120)
    if upload is not None:
        data = upload.getvalue()
        if len(data) > MAX_JOB_BYTES:
            st.error(f"The file is {len(data):,} bytes; a job config is a few kilobytes.")
            return "", ""
        try:
            return data.decode("utf-8"), upload.name
        except UnicodeDecodeError:
            st.error(md(f"{upload.name} is not text: upload the config itself."))
            return "", ""
    return pasted, ""


def render(prof: cluster.ModelProfile, label: str, hw: dict[str, Any]) -> None:
    """The panel: read the job, review it on ``prof`` (the sidebar's model, ``label``) with the
    page's hardware ``hw``, and show the review."""
    with st.expander("Review a job: torchtitan, Megatron-LM, DeepSpeed or vLLM config", expanded=False):
        text, name = _job_text()
        left, right = st.columns(2)
        devices = left.number_input("GPUs, where the job does not say (0: as it says)", 0, 1 << 20, 0, key="rv_gpus")
        seq = right.number_input("Tokens a sequence (DeepSpeed's file has none)", 1, 1 << 20, 4096, key="rv_seq")
        if not text.strip():
            st.caption("The review prices the job on this page's accelerator and links and the sidebar's model.")
            return
        try:
            job = review.read_job(text, name, None, int(devices) or None, int(seq))
        except review.JobError as exc:
            st.error(md(f"Cannot read the job: {exc}"))
            return
        if job.model and _model_name(job.model) != _model_name(label):
            st.warning(
                md(
                    f"The job names {job.model} and the sidebar's model is {label}: choose "
                    f"{job.model.removeprefix('hf:')} in the sidebar (Hugging Face architecture) to review it "
                    "on its own model."
                )
            )
            return
        target = hardware_cluster(hw, engine=job.engine)
        try:
            rv = review.review_job(prof, job, target)
        except (review.JobError, ValueError) as exc:
            st.error(md(f"Cannot review the job: {exc}"))
            return
        _show(rv, hw["accelerator"])


def _show(rv: review.Review, accelerator: str) -> None:
    job = rv.job
    st.markdown(f"**{md(FORMAT_NAMES[job.format])}**, read by {md(job.reader)}")
    rows = [{"setting": s.name, "value": str(s.value), "from": s.source} for s in job.settings if s.name != "model"]
    st.dataframe(rows, hide_index=True, width="stretch")
    if job.unknown:
        st.warning(md("Not fields of this format (not read): " + ", ".join(job.unknown)))
    if job.unpriced:
        more = f" and {len(job.unpriced) - MAX_LISTED} more" if len(job.unpriced) > MAX_LISTED else ""
        st.caption(md("Read, not priced: " + ", ".join(job.unpriced[:MAX_LISTED]) + more))
    for note in (*job.notes, *rv.notes):
        st.info(md(note))
    (st.success if rv.fits else st.error)(md(verdict(rv, accelerator)))
    st.markdown(md(memory_line(rv)))
    st.markdown(md(speed_line(rv)))
    st.markdown(md(dominant_line(rv)))
    if rv.result.assumes:
        st.caption(md("The time assumes: " + "; ".join(rv.result.assumes)))
    if not rv.changes:
        st.caption("No change on the same GPUs is surely faster (none's band lies below the job's).")
    for i, change in enumerate(rv.changes):
        st.markdown(md(change_line(i + 1, rv, i)))
        file_name, body, mime = review.job_file(job, change.result.layout, job.workload)
        st.download_button(f"Download {file_name}", body, file_name, mime, key=f"rv_dl_{i}")

"""Files translated as jobs (POST /files, LibreTranslate's /translate_file, DeepL's /v2/document): an upload is read by
its format and stored before its id is returned, then translated in the background with a bounded share of the
engine, its progress kept, and the translated file kept for download until NMT_JOB_RETENTION_S after it finished.

- `store.py`     JobStore: a directory a job under NMT_JOB_DIR (upload, `job.json`, output), written durably
- `runner.py`    Runner: the queue, the jobs running at once, restarts and retention
- `share.py`     Share: the segments of all jobs in the engine at once, bounded
- `segments.py`  the units as the engine takes them: long plain ones cut at line breaks, chunks of a few
- `intake.py`    an upload read by its format, its name made safe, the job that will translate it
"""

from app.jobs.runner import Runner, TooManyJobs
from app.jobs.store import Job, JobError, JobNotDone, JobStore, UnknownJob

__all__ = ["Job", "JobError", "JobNotDone", "JobStore", "Runner", "TooManyJobs", "UnknownJob"]

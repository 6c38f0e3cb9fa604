"""A redactor for the fault tests, named by ``LITTLE_REDACTOR=tests.faults.redactors:secrets``:
the values of keys named ``api_key`` or ``token``, and the prompt secret of
``$FAULTS_SECRETS`` (``prompt,key,token``) wherever it appears, are recorded as
``[redacted]``."""

from __future__ import annotations

import os

from little.redaction import redact_keys, redact_values

secrets = redact_values(
    os.environ.get("FAULTS_SECRETS", "p,k,t").split(",")[0],
    also=redact_keys("api_key", "token"),
)

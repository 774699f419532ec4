"""Schemathesis hooks of the API conformance run (`run.py` names this file in
SCHEMATHESIS_HOOKS).

A batch's NDJSON body (`application/x-ndjson`) is text, and its schema a string; schemathesis
has no serializer for the media type. A string is sent as it is. A value that is not a string
(the negative cases: an array or a number where the schema says string) has no form as text at
all, so it is sent as no body, which the server must refuse as it refuses any empty batch
(400 `batch_empty`).
"""

import schemathesis


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx, value):
    if isinstance(value, str):
        return value.encode()
    return None

#!/usr/bin/env python3
"""A walk through the data API with the Python client that openapi-python-client generates
from the server's document (`tests/clients/run.py` generates it and runs this):

    PYTHONPATH=<dir holding intake_api_client> python3 walk.py BASE_URL SLUG SANDBOX_KEY

Creates three records, reads one, lists, searches, polls from before the first create
following `next_cursor` until `poll_cursor`, replaces, deletes, and reads the deleted record
for a typed error; then creates three records in one batch (ids in the order sent) and sends
a batch with a bad record for the typed error that names it. Every answer is one of the
generated models (attrs classes), checked with `isinstance`, never a dict. The server must
hold no poll back (`[poll] hold_back = "0s"`): its default holds records back for 60 s.
"""

import datetime
import sys
import uuid
from http import HTTPStatus
from typing import Any, TypeVar

from intake_api_client import AuthenticatedClient
from intake_api_client.api.data import (
    create_record,
    create_record_batch,
    delete_record,
    get_record,
    list_records,
    poll_records,
    replace_record,
    search_records,
)
from intake_api_client.models import (
    Accepted,
    BatchAccepted,
    BatchRecord,
    Error,
    PollPage,
    Record,
    RecordPage,
    RecordRefusal,
)
from intake_api_client.types import UNSET, Response, Unset

T = TypeVar("T")


def answer(response: Response[Any], status: HTTPStatus, model: type[T]) -> T:
    """The parsed body of `response`, which must have `status` and be a `model`."""
    assert response.status_code == status, (response.status_code, response.content)
    assert isinstance(response.parsed, model), response.parsed
    return response.parsed


def main() -> None:
    base_url, slug, key = sys.argv[1:4]
    client = AuthenticatedClient(base_url=base_url, token=key, raise_on_unexpected_status=True)
    marker = f"walk-{uuid.uuid4().hex[:12]}"
    # A second back: `since` counts from this machine's clock, the server stamps with its own.
    since = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1)).isoformat()

    # Create: durable before the 202, readable at once.
    payloads = [{"email": f"ada{n}@example.com", "marker": marker, "n": n} for n in range(3)]
    ids = []
    for payload in payloads:
        accepted = answer(
            create_record.sync_detailed(slug, client=client, body=payload),
            HTTPStatus.ACCEPTED,
            Accepted,
        )
        assert accepted.status == "accepted" and accepted.id.startswith("rec_"), accepted
        ids.append(accepted.id)

    # Get one.
    record = answer(get_record.sync_detailed(slug, ids[0], client=client), HTTPStatus.OK, Record)
    assert record.id == ids[0] and record.payload == payloads[0], record
    assert isinstance(record.created_at, datetime.datetime), record.created_at

    # List, newest first, two a page: the second page ends the listing.
    listed: list[str] = []
    cursor: str | Unset = UNSET
    while True:
        page = answer(
            list_records.sync_detailed(slug, client=client, limit=2, cursor=cursor),
            HTTPStatus.OK,
            RecordPage,
        )
        listed += [r.id for r in page.data]
        cursor = page.pagination.next_cursor
        if not isinstance(cursor, str):
            break
    assert listed == ids[::-1], (listed, ids)

    # Search: exact at once (the unindexed tail is searched too: docs/src/search-and-poll.md).
    found = answer(
        search_records.sync_detailed(slug, client=client, q=marker), HTTPStatus.OK, RecordPage
    )
    assert [r.id for r in found.data] == ids[::-1], found

    # Poll, oldest first, one a page: `next_cursor` while a backlog remains, then `poll_cursor`.
    polled: list[str] = []
    poll = answer(
        poll_records.sync_detailed(slug, client=client, since=since, limit=1),
        HTTPStatus.OK,
        PollPage,
    )
    while True:
        polled += [r.id for r in poll.data]
        if not isinstance(poll.next_cursor, str):
            break
        poll = answer(
            poll_records.sync_detailed(slug, client=client, cursor=poll.next_cursor, limit=1),
            HTTPStatus.OK,
            PollPage,
        )
    assert polled == ids, (polled, ids)
    assert isinstance(poll.poll_cursor, str), poll
    caught_up = answer(
        poll_records.sync_detailed(slug, client=client, cursor=poll.poll_cursor),
        HTTPStatus.OK,
        PollPage,
    )
    assert caught_up.data == [] and isinstance(caught_up.poll_cursor, str), caught_up

    # Replace: the payload changes, the id and created_at stay; search sees the new text.
    replaced = {"email": "grace@example.com", "n": 0}
    answer(
        replace_record.sync_detailed(slug, ids[0], client=client, body=replaced),
        HTTPStatus.ACCEPTED,
        Accepted,
    )
    after_replace = answer(
        get_record.sync_detailed(slug, ids[0], client=client), HTTPStatus.OK, Record
    )
    assert after_replace.payload == replaced, after_replace
    assert after_replace.created_at == record.created_at, after_replace
    found = answer(
        search_records.sync_detailed(slug, client=client, q=marker), HTTPStatus.OK, RecordPage
    )
    assert [r.id for r in found.data] == ids[:0:-1], found

    # Delete, then the error model: 404 `record_not_found`.
    answer(
        delete_record.sync_detailed(slug, ids[1], client=client), HTTPStatus.ACCEPTED, Accepted
    )
    error = answer(
        get_record.sync_detailed(slug, ids[1], client=client), HTTPStatus.NOT_FOUND, Error
    )
    assert error.error.code == "record_not_found", error
    assert error.error.request_id.startswith("req_"), error

    # A batch: one commit, one entry per record in the order sent, one created_at for all,
    # ids ascending in that order (so search, newest first, shows them reversed).
    batch_marker = f"{marker}-batch"
    batch = [{"email": f"grace{n}@example.com", "marker": batch_marker, "n": n} for n in range(3)]
    accepted_batch = answer(
        create_record_batch.sync_detailed(slug, client=client, body=batch),
        HTTPStatus.ACCEPTED,
        BatchAccepted,
    )
    entries = accepted_batch.data
    assert all(isinstance(entry, BatchRecord) for entry in entries), accepted_batch
    assert [entry.index for entry in entries] == [0, 1, 2], accepted_batch
    batch_ids = [entry.id for entry in entries]
    assert batch_ids == sorted(batch_ids) and len(set(batch_ids)) == 3, batch_ids
    assert len({entry.created_at for entry in entries}) == 1, accepted_batch
    for entry, payload in zip(entries, batch, strict=True):
        stored = answer(
            get_record.sync_detailed(slug, entry.id, client=client), HTTPStatus.OK, Record
        )
        assert stored.payload == payload and stored.created_at == entry.created_at, stored
    found = answer(
        search_records.sync_detailed(slug, client=client, q=batch_marker),
        HTTPStatus.OK,
        RecordPage,
    )
    assert [r.id for r in found.data] == batch_ids[::-1], found

    # A batch with a bad record stores nothing; the error names the record by its index.
    refused_marker = f"{marker}-refused"
    refused = answer(
        create_record_batch.sync_detailed(
            slug,
            client=client,
            body=[
                {"email": "ada@example.com", "marker": refused_marker},
                {"marker": refused_marker},
            ],
        ),
        HTTPStatus.BAD_REQUEST,
        Error,
    )
    assert refused.error.code == "batch_invalid", refused
    refusals = refused.error.records
    assert isinstance(refusals, list) and all(isinstance(r, RecordRefusal) for r in refusals)
    assert [(r.index, r.code) for r in refusals] == [(1, "missing_required_field")], refusals
    found = answer(
        search_records.sync_detailed(slug, client=client, q=refused_marker),
        HTTPStatus.OK,
        RecordPage,
    )
    assert found.data == [], found
    print(f"python walk: {len(ids)} records created, read, listed, searched, polled, "
          f"replaced, deleted; the error typed; {len(batch_ids)} created in a batch, "
          "a refused batch's error typed")


if __name__ == "__main__":
    main()

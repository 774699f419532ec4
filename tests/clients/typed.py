#!/usr/bin/env python3
"""The Python client of an endpoint with a JSON Schema has a typed payload
(`tests/clients/run.py` generates it from the endpoint's own document and runs this):

    PYTHONPATH=<dir holding intake_api_client> python3 typed.py BASE_URL SLUG SANDBOX_KEY

The schema's properties are attributes of the generated models (`WritePayload`, its nested
`WritePayloadCustomer`, and `PayloadItem` from its `$defs`): mypy --strict checks their use,
and an assignment of a string property to an `int` must be an error (the `type: ignore`
below would otherwise be unused, which --strict refuses), so the payload is not `Any`. Then
it creates a record with them and reads it back as them.
"""

import sys
from http import HTTPStatus

from intake_api_client import AuthenticatedClient
from intake_api_client.api.data import create_record, get_record
from intake_api_client.models import (
    Accepted,
    PayloadItem,
    Record,
    WritePayload,
    WritePayloadCustomer,
)
from intake_api_client.types import Unset


def main() -> None:
    base_url, _slug, key = sys.argv[1:4]
    client = AuthenticatedClient(base_url=base_url, token=key, raise_on_unexpected_status=True)
    payload = WritePayload(
        email="ada@example.com",
        customer=WritePayloadCustomer(name="Ada", vip=True),
        items=[PayloadItem(sku="ABC-1", quantity=2)],
    )
    created = create_record.sync_detailed(client=client, body=payload)
    assert created.status_code == HTTPStatus.ACCEPTED, (created.status_code, created.content)
    assert isinstance(created.parsed, Accepted), created.parsed

    read = get_record.sync_detailed(created.parsed.id, client=client)
    assert read.status_code == HTTPStatus.OK, (read.status_code, read.content)
    record = read.parsed
    assert isinstance(record, Record), record
    name: str = record.payload.customer.name
    _: int = record.payload.customer.name  # type: ignore[assignment]
    assert name == "Ada", record.payload
    items = record.payload.items
    assert not isinstance(items, Unset) and [i.sku for i in items] == ["ABC-1"], items
    assert record.payload.to_dict() == payload.to_dict(), record.payload
    print(f"typed payload: {record.payload.to_dict()}")


if __name__ == "__main__":
    main()

//! Records: the data operations' rows (records, idempotency keys) and the batch apply of the ingest writer.

pub trait RecordsRead {}

pub trait RecordsStore {}

//! The request log: a store of its own (`requests.redb` on redb), so logging every call never waits on the data path's commits.

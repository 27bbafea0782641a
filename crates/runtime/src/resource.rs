//! What the runtime needs to know about an object: defined in `listwatch-api` next to
//! [`Object`](listwatch_api::Object) (see [`listwatch_api::resource`] for why), used and
//! re-exported here.

pub use listwatch_api::resource::{HasMetadata, MetadataFields, ObjectKey, Resource};

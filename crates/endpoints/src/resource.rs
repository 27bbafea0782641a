//! A kind's spec paired with the storage that serves it; the spec itself
//! ([`KindSpec`] and its parts) lives in `listwatch-kinds` and is re-exported here.

pub use listwatch_kinds::{
    DefaultStrategy, GcPolicy, Generation, GracefulDeletion, KindSpec, KindStrategy,
    NameValidation, Printer, PrinterColumn, ScaleSubresource, StatusUpdate, TableColumn,
};
use std::sync::Arc;

/// A resource description paired with the storage that serves it.
///
/// The storage is any `Storage`: a backend directly, or a cacher over it; the installer
/// cannot tell the difference.
#[derive(Clone)]
pub struct Resource {
    /// The description.
    pub info: Arc<KindSpec>,
    /// Where its objects live.
    pub storage: Arc<dyn listwatch_storage::Storage>,
    /// Stopped when the resource stops being served: its open watches end.
    pub(crate) removed: Arc<crate::stop::StopSignal>,
}

impl Resource {
    /// `info` served from `storage`.
    pub fn new(info: KindSpec, storage: Arc<dyn listwatch_storage::Storage>) -> Self {
        Self {
            info: Arc::new(info),
            storage,
            removed: Arc::default(),
        }
    }
}

impl listwatch_kinds::Kinded for Resource {
    fn spec(&self) -> &KindSpec {
        &self.info
    }
}

impl std::fmt::Debug for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resource")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

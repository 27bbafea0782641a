//! [`KindSpec`]: what the server needs to know to serve one kind of object.
//!
//! A spec is plain data plus its kind's [`KindStrategy`] (the code that differs per kind);
//! it never holds the storage. The endpoints pair each with an `Arc<dyn Storage>`, so the same
//! spec serves a backend directly or a cacher wrapped around it.

use std::sync::Arc;

use crate::strategy::{DefaultStrategy, KindStrategy};

use listwatch_api::{SelectableFields, TypeMeta};
use serde_json::Value;

/// How object names of a resource are validated (upstream's `ValidateNameFunc`s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NameValidation {
    /// DNS-1123 subdomain: ≤ 253 of `[a-z0-9.-]` (pods, configmaps, most resources).
    #[default]
    Subdomain,
    /// DNS-1123 label: ≤ 63 of `[a-z0-9-]` (namespaces).
    Label,
    /// DNS-1035 label: a DNS label starting with a letter (services).
    Label1035,
    /// Any name that is a valid path segment (events, leases use subdomain upstream too,
    /// but some resources, e.g. nodes with IP names, only need this).
    PathSegment,
}

/// One extra column of the server-side Table printing (like a CRD's
/// `additionalPrinterColumns`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrinterColumn {
    /// The column header, e.g. `Ready`.
    pub name: String,
    /// The OpenAPI type: `string`, `integer`, `number`, `boolean`, `date`.
    pub type_: String,
    /// Where the value is: a simple JSONPath such as `.status.phase` or `.spec.ports[0].port`.
    pub json_path: String,
    /// A description for clients.
    pub description: String,
    /// 0 for the default view, 1 and up for `-o wide`.
    pub priority: i32,
    /// The OpenAPI format clients are told (a CRD column's `format`), `""` for none.
    pub format: String,
}

impl PrinterColumn {
    /// A priority-0 column.
    pub fn new(name: &str, type_: &str, json_path: &str) -> Self {
        Self {
            name: name.into(),
            type_: type_.into(),
            json_path: json_path.into(),
            description: String::new(),
            priority: 0,
            format: String::new(),
        }
    }

    /// The same column shown only with `-o wide`.
    #[must_use]
    pub fn wide(mut self) -> Self {
        self.priority = 1;
        self
    }
}

/// How Table rows are printed, for kinds whose strategy does not print them itself
/// ([`KindStrategy::table_columns`]: pods, deployments).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Printer {
    /// NAME, AGE.
    #[default]
    Default,
    /// NAME, these columns, AGE.
    Columns(Vec<PrinterColumn>),
}

/// Where a resource keeps what its `/scale` subresource shows (like a CRD's `scale`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScaleSubresource {
    /// Dotted path of the desired replicas, e.g. `spec.replicas`.
    pub spec_replicas_path: String,
    /// Dotted path of the observed replicas, e.g. `status.replicas`.
    pub status_replicas_path: String,
    /// Dotted path of the pods' label selector (a string, or a `LabelSelector`).
    pub label_selector_path: Option<String>,
}

impl ScaleSubresource {
    /// `spec.replicas` / `status.replicas`, no selector.
    pub fn replicas() -> Self {
        Self {
            spec_replicas_path: "spec.replicas".into(),
            status_replicas_path: "status.replicas".into(),
            label_selector_path: None,
        }
    }

    /// Sets the selector path.
    #[must_use]
    pub fn label_selector(mut self, path: &str) -> Self {
        self.label_selector_path = Some(path.into());
        self
    }
}

/// Which field selector labels a request may name, and how an unknown one is refused
/// (upstream: the field label conversion function a kind's version registers with
/// `AddFieldLabelConversionFunc`, which the list and watch handlers call on every label
/// before reading anything; a 400 with the function's message).
///
/// Invariant: a kind that declares selectable fields is not at [`FieldLabels::Default`]
/// (the builders that declare them move it to [`FieldLabels::NOT_SUPPORTED`]), so a declared
/// field is always reachable; a kind whose upstream `GetAttrs` has fields no registered
/// function accepts (`apps/v1` replica sets' `status.replicas`) declares none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldLabels {
    /// No function registered (most kinds, every `apps/v1` one included): `metadata.name`
    /// and `metadata.namespace` only; anything else is
    /// `"X" is not a known field selector: only "metadata.name", "metadata.namespace"`
    /// (`runtime.DefaultMetaV1FieldSelectorConversion`).
    #[default]
    Default,
    /// A registered function answering `field label not supported: X` (core `v1` pods,
    /// nodes, replication controllers, events, namespaces, secrets, services;
    /// `certificates.k8s.io/v1` CSRs; `events.k8s.io/v1` events): `metadata.name`, the
    /// declared fields, and `metadata.namespace` when `namespace` (nodes, namespaces and CSRs
    /// do not list it).
    NotSupported {
        /// Whether `metadata.namespace` is accepted.
        namespace: bool,
    },
    /// `batch/v1` jobs' function: `field label "X" not supported for batchv1.Job`.
    Job,
}

impl FieldLabels {
    /// A registered function that accepts `metadata.namespace`.
    pub const NOT_SUPPORTED: Self = Self::NotSupported { namespace: true };
    /// A registered function of a kind that does not list `metadata.namespace`.
    pub const NOT_SUPPORTED_NO_NAMESPACE: Self = Self::NotSupported { namespace: false };
}

/// Whether a DELETE may leave an object for a grace period (upstream's
/// `RESTGracefulDeleteStrategy`); see `docs/endpoints.md`, Object lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GracefulDeletion {
    /// Deleted at once (unless finalizers hold it): most resources.
    #[default]
    None,
    /// Pods' `CheckGracefulDelete`: a scheduled pod that has not terminated stays for the
    /// grace period (the DELETE's `gracePeriodSeconds`, else its
    /// `spec.terminationGracePeriodSeconds`, else 30), until a DELETE with grace 0.
    Pod,
}

/// What a DELETE without a propagation policy does with dependents (upstream's
/// `GarbageCollectionDeleteStrategy.DefaultGarbageCollectionPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GcPolicy {
    /// Dependents are deleted in the background (the default, and every `apps/v1` kind).
    #[default]
    DeleteDependents,
    /// Dependents are orphaned (upstream's legacy rule for `v1` ReplicationControllers,
    /// `batch/v1` Jobs and the `extensions/v1beta1`, `apps/v1beta1/2` workload kinds).
    OrphanDependents,
    /// The resource takes no part in garbage collection: a DELETE never sets the `orphan`
    /// or `foregroundDeletion` finalizers (and drops them if present), as for events.
    Unsupported,
}

/// When `metadata.generation` is set and bumped (upstream: each kind's strategy's
/// `PrepareForCreate`/`PrepareForUpdate`; the registry's `BeforeDelete` bumps a set
/// generation when the object is first marked for deletion).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Generation {
    /// Never set: a create drops one, an update keeps the stored (absent) one — config
    /// maps, secrets, services, namespaces, nodes and the other kinds without a spec the
    /// strategy versions.
    None,
    /// 1 on create, +1 when anything but metadata (and the status, where `/status` is a
    /// subresource) changes: pods (`updatePodGeneration`), custom resources (the custom
    /// resource strategy), and, by default, any declared kind.
    #[default]
    Spec,
    /// As [`Generation::Spec`], and also +1 when the annotations change (deployments: their
    /// annotations are copied to their replica sets).
    SpecAndAnnotations,
}

/// What a `/status` write may change besides the status (upstream: each kind's status
/// strategy's `PrepareForUpdate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StatusUpdate {
    /// Only the status: every other field, metadata included, is the stored object's
    /// (custom resources, and kinds whose status strategy calls
    /// `metav1.ResetObjectMetaForStatus`).
    #[default]
    StatusOnly,
    /// The status and the metadata, except these metadata fields, which stay the stored
    /// object's (besides the fields no update may change): pods' `podStatusStrategy` resets
    /// `ownerReferences` (and the spec and `deletionTimestamp`), deployments' status strategy
    /// the labels, services' nothing but the spec.
    StatusAndMetadataExcept(&'static [&'static str]),
}

/// Everything the installer needs to serve one resource.
#[derive(Debug, Clone)]
pub struct KindSpec {
    /// API group, `""` for the core group.
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Plural name used in paths, e.g. `pods`.
    pub plural: String,
    /// Singular name, e.g. `pod`.
    pub singular: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Short names for kubectl, e.g. `po`.
    pub short_names: Vec<String>,
    /// Categories, e.g. `all`.
    pub categories: Vec<String>,
    /// Fields a field selector may name (beyond `metadata.name`/`metadata.namespace`).
    pub selectable_fields: SelectableFields,
    /// Which field selector labels are accepted and how others are refused. Custom resources
    /// follow upstream's custom resource converter whatever this says: `metadata.name`,
    /// `metadata.namespace` when namespaced, the declared `selectableFields`, else
    /// `field label not supported: X`.
    pub field_labels: FieldLabels,
    /// The field the cacher indexes watchers by (pods: `spec.nodeName`).
    pub trigger_field: Option<String>,
    /// Server-side Table printing.
    pub printer: Printer,
    /// Whether `/status` is a subresource (main-resource writes then keep the old status).
    pub status_subresource: bool,
    /// Whether `/finalize` is a subresource (namespaces: the only write that changes
    /// `spec.finalizers`; PUT only).
    pub finalize_subresource: bool,
    /// The `/scale` subresource, when there is one.
    pub scale: Option<ScaleSubresource>,
    /// Whether `/approval` is a subresource (certificate signing requests: written as
    /// `/status` is, the only write that may add an `Approved` or `Denied` condition).
    pub approval_subresource: bool,
    /// Whether `/ephemeralcontainers` is a subresource (pods: the only write that changes
    /// `spec.ephemeralContainers`, through the strategy's
    /// [`ephemeral_containers_update`](crate::KindStrategy::ephemeral_containers_update)).
    pub ephemeral_containers_subresource: bool,
    /// The verbs served, when not all of them (upstream's read-only `componentstatuses`:
    /// `get` and `list`); any other verb is refused with 405.
    pub verbs: Option<&'static [&'static str]>,
    /// Name rules.
    pub name_validation: NameValidation,
    /// The resource segment of storage keys (defaults to `plural`, `plural.group` for
    /// non-core groups that could clash).
    pub storage_resource: String,
    /// The kind's code: defaulting on create, its own Table printing
    /// ([`DefaultStrategy`] for plain kinds).
    pub strategy: Arc<dyn KindStrategy>,
    /// Whether a PUT of a missing object creates it (upstream's per-resource
    /// `AllowCreateOnUpdate`: e.g. events, endpoints, leases, the RBAC kinds; not pods,
    /// namespaces or custom resources). Off by default.
    pub allow_create_on_update: bool,
    /// A custom resource (served as upstream serves a CRD's): strategic merge is refused
    /// (415) and its schema is [`custom_schema`](Self::custom_schema) rather than a
    /// built-in definition.
    pub custom_resource: bool,
    /// A custom resource's declared `openAPIV3Schema` (`None`: every field is kept,
    /// `x-kubernetes-preserve-unknown-fields`).
    pub custom_schema: Option<Arc<Value>>,
    /// Whether a DELETE may keep objects for a grace period.
    pub graceful_deletion: GracefulDeletion,
    /// What a DELETE without a propagation policy does with dependents.
    pub gc_policy: GcPolicy,
    /// Whether a DELETE that removes the object answers with it (upstream's
    /// `Store.ReturnDeletedObject`: pods, services, service accounts, namespaces) rather than
    /// a `Success` Status naming it (every other kind, custom resources included). An
    /// object a DELETE only marks (finalizers, a grace period) is returned either way.
    pub return_deleted_object: bool,
    /// When `metadata.generation` is set and bumped.
    pub generation: Generation,
    /// What a `/status` write may change besides the status.
    pub status_update: StatusUpdate,
    /// How this version reads and writes the objects of the storage it shares with an
    /// earlier spec of the same `storage_resource` (`events.k8s.io/v1` Events over `v1`
    /// Events); `None`: its own storage, or, for a custom resource's other versions, the
    /// `None` conversion ([`crate::conversion::ApiVersionOnly`]).
    pub conversion: Option<Arc<dyn crate::conversion::Conversion>>,
    /// Set while the kind is going away: a custom resource whose CustomResourceDefinition
    /// is terminating, whose creates are refused (405, as upstream's CRD handler refuses
    /// them). Shared by the clones of the spec, so the CRD controller turns it for every
    /// served version at once without changing the kind set.
    pub terminating: Terminating,
    /// The `Warning` every request to this version is answered with (a custom resource's
    /// deprecated version: its `deprecationWarning`, or upstream's default text).
    pub warning: Option<String>,
    /// The `Warning` a DELETE or collection DELETE that names no propagation policy (neither
    /// `propagationPolicy` nor `orphanDependents`) is answered with: upstream's Job storage
    /// warns that a batch/v1 job's pods are kept by default.
    pub delete_warning: Option<&'static str>,
}

/// Whether a kind is going away ([`KindSpec::terminating`]): turned once by its owner (the
/// CRD controller), read by every create. Clones share it.
#[derive(Debug, Clone, Default)]
pub struct Terminating(Arc<std::sync::atomic::AtomicBool>);

impl Terminating {
    /// Marks the kind as going away (for good: a CRD's deletion cannot be undone).
    pub fn set(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether the kind is going away.
    pub fn is_set(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }
}

impl KindSpec {
    /// A namespaced resource with default printing and no selectable fields.
    pub fn new(group: &str, version: &str, plural: &str, kind: &str) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            singular: kind.to_ascii_lowercase(),
            kind: kind.into(),
            namespaced: true,
            short_names: Vec::new(),
            categories: Vec::new(),
            selectable_fields: SelectableFields::none(),
            field_labels: FieldLabels::Default,
            trigger_field: None,
            printer: Printer::Default,
            status_subresource: false,
            finalize_subresource: false,
            scale: None,
            approval_subresource: false,
            ephemeral_containers_subresource: false,
            verbs: None,
            name_validation: NameValidation::Subdomain,
            storage_resource: plural.into(),
            strategy: Arc::new(DefaultStrategy),
            allow_create_on_update: false,
            custom_resource: false,
            custom_schema: None,
            graceful_deletion: GracefulDeletion::None,
            gc_policy: GcPolicy::DeleteDependents,
            return_deleted_object: false,
            generation: Generation::Spec,
            status_update: StatusUpdate::StatusOnly,
            conversion: None,
            warning: None,
            delete_warning: None,
            terminating: Terminating::default(),
        }
    }

    /// Sets whether objects live in namespaces.
    #[must_use]
    pub fn namespaced(mut self, namespaced: bool) -> Self {
        self.namespaced = namespaced;
        self
    }

    /// Sets the short names.
    #[must_use]
    pub fn short_names<I: IntoIterator<Item = S>, S: Into<String>>(mut self, names: I) -> Self {
        self.short_names = names.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the categories.
    #[must_use]
    pub fn categories<I: IntoIterator<Item = S>, S: Into<String>>(mut self, names: I) -> Self {
        self.categories = names.into_iter().map(Into::into).collect();
        self
    }

    /// Declares the selectable fields.
    #[must_use]
    pub fn selectable_fields<I: IntoIterator<Item = S>, S: Into<Box<str>>>(
        mut self,
        paths: I,
    ) -> Self {
        self.selectable_fields = SelectableFields::new(paths);
        self.registers_field_labels()
    }

    /// Declaring selectable fields is what upstream's registered field label function does:
    /// a kind still at [`FieldLabels::Default`] moves to [`FieldLabels::NOT_SUPPORTED`] (a kind
    /// that set its own function first keeps it).
    fn registers_field_labels(mut self) -> Self {
        if self.field_labels == FieldLabels::Default {
            self.field_labels = FieldLabels::NOT_SUPPORTED;
        }
        self
    }

    /// Declares what a selectable field reads as in an object that lacks it (see
    /// [`SelectableFields::with_default`]); adds the field if it was not declared.
    #[must_use]
    pub fn field_default(mut self, path: &str, value: &str) -> Self {
        self.selectable_fields = self.selectable_fields.with_default(path, value);
        self.registers_field_labels()
    }

    /// Declares a selectable field `name` read from the first of `paths` with a non-empty
    /// value (see [`SelectableFields::with_reads`]).
    #[must_use]
    pub fn field_reads(mut self, name: &str, paths: &[&str]) -> Self {
        self.selectable_fields = self.selectable_fields.with_reads(name, paths);
        self.registers_field_labels()
    }

    /// Sets how field selector labels are checked.
    #[must_use]
    pub fn field_labels(mut self, labels: FieldLabels) -> Self {
        self.field_labels = labels;
        self
    }

    /// The 400 message for a field selector naming `label`, or `None` when the label is
    /// accepted (see [`FieldLabels`]).
    pub fn field_label_error(&self, label: &str) -> Option<String> {
        let declared = || self.selectable_fields.paths().any(|p| p == label);
        if self.custom_resource {
            let ok = label == "metadata.name"
                || (self.namespaced && label == "metadata.namespace")
                || declared();
            return (!ok).then(|| format!("field label not supported: {label}"));
        }
        match self.field_labels {
            FieldLabels::Default => (label != "metadata.name" && label != "metadata.namespace")
                .then(|| {
                    let q = crate::field::go_quote(label);
                    format!(
                        "{q} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                    )
                }),
            FieldLabels::NotSupported { namespace } => {
                let ok = label == "metadata.name"
                    || (namespace && label == "metadata.namespace")
                    || declared();
                (!ok).then(|| format!("field label not supported: {label}"))
            }
            FieldLabels::Job => {
                let ok =
                    label == "metadata.name" || label == "metadata.namespace" || declared();
                (!ok).then(|| {
                    let q = crate::field::go_quote(label);
                    format!("field label {q} not supported for batchv1.Job")
                })
            }
        }
    }

    /// Sets the trigger field (must also be selectable).
    #[must_use]
    pub fn trigger_field(mut self, path: &str) -> Self {
        self.trigger_field = Some(path.into());
        self
    }

    /// Sets the printer.
    #[must_use]
    pub fn printer(mut self, printer: Printer) -> Self {
        self.printer = printer;
        self
    }

    /// Declares a `/status` subresource.
    #[must_use]
    pub fn status_subresource(mut self, on: bool) -> Self {
        self.status_subresource = on;
        self
    }

    /// Declares a `/finalize` subresource (upstream serves it for namespaces only).
    #[must_use]
    pub fn finalize_subresource(mut self, on: bool) -> Self {
        self.finalize_subresource = on;
        self
    }

    /// Declares a `/scale` subresource.
    #[must_use]
    pub fn scale(mut self, scale: ScaleSubresource) -> Self {
        self.scale = Some(scale);
        self
    }

    /// Declares an `/approval` subresource (upstream serves it for certificate signing
    /// requests only).
    #[must_use]
    pub fn approval_subresource(mut self, on: bool) -> Self {
        self.approval_subresource = on;
        self
    }

    /// Declares an `/ephemeralcontainers` subresource (upstream serves it for pods only).
    #[must_use]
    pub fn ephemeral_containers_subresource(mut self, on: bool) -> Self {
        self.ephemeral_containers_subresource = on;
        self
    }

    /// Restricts the verbs served (see [`KindSpec::verbs`]).
    #[must_use]
    pub fn only_verbs(mut self, verbs: &'static [&'static str]) -> Self {
        self.verbs = Some(verbs);
        self
    }

    /// Whether `verb` (a discovery verb: `get`, `list`, `watch`, `create`, `update`, `patch`,
    /// `delete`, `deletecollection`) is served.
    pub fn serves_verb(&self, verb: &str) -> bool {
        self.verbs.is_none_or(|v| v.contains(&verb))
    }

    /// Sets the name rules.
    #[must_use]
    pub fn name_validation(mut self, v: NameValidation) -> Self {
        self.name_validation = v;
        self
    }

    /// Sets the singular name.
    #[must_use]
    pub fn singular(mut self, singular: &str) -> Self {
        self.singular = singular.into();
        self
    }

    /// Sets the storage key's resource segment.
    #[must_use]
    pub fn storage_resource(mut self, segment: &str) -> Self {
        self.storage_resource = segment.into();
        self
    }

    /// Sets the kind's strategy.
    #[must_use]
    pub fn strategy(mut self, strategy: impl KindStrategy) -> Self {
        self.strategy = Arc::new(strategy);
        self
    }

    /// Lets a PUT of a missing object create it (upstream's `AllowCreateOnUpdate`).
    #[must_use]
    pub fn allow_create_on_update(mut self, on: bool) -> Self {
        self.allow_create_on_update = on;
        self
    }

    /// Marks a custom resource, with its declared `openAPIV3Schema` (`None`: keep every
    /// field). The installer adds it to the schema catalog; a schema the catalog refuses
    /// (see `listwatch_schema::Catalog::add_custom`) is logged and replaced by one that
    /// keeps every field — check it first with `Catalog::add_custom` to refuse it instead.
    #[must_use]
    pub fn custom_resource(mut self, schema: Option<Value>) -> Self {
        self.custom_resource = true;
        self.custom_schema = schema.map(Arc::new);
        self
    }

    /// Sets the graceful deletion strategy.
    #[must_use]
    pub fn graceful_deletion(mut self, g: GracefulDeletion) -> Self {
        self.graceful_deletion = g;
        self
    }

    /// Sets the default garbage collection policy of a DELETE.
    #[must_use]
    pub fn gc_policy(mut self, p: GcPolicy) -> Self {
        self.gc_policy = p;
        self
    }

    /// Sets the warning a DELETE without a propagation policy is answered with
    /// ([`KindSpec::delete_warning`]).
    #[must_use]
    pub fn delete_warning(mut self, text: &'static str) -> Self {
        self.delete_warning = Some(text);
        self
    }

    /// Makes a DELETE that removes an object answer with the object instead of a Status
    /// (upstream's `ReturnDeletedObject`).
    #[must_use]
    pub fn return_deleted_object(mut self, on: bool) -> Self {
        self.return_deleted_object = on;
        self
    }

    /// Sets when `metadata.generation` is set and bumped.
    #[must_use]
    pub fn generation(mut self, g: Generation) -> Self {
        self.generation = g;
        self
    }

    /// Sets what a `/status` write may change besides the status.
    #[must_use]
    pub fn status_update(mut self, s: StatusUpdate) -> Self {
        self.status_update = s;
        self
    }

    /// Serves this version over the storage of the first spec with the same
    /// `storage_resource`, converted by `conversion`.
    #[must_use]
    pub fn converted(mut self, conversion: impl crate::conversion::Conversion) -> Self {
        self.conversion = Some(Arc::new(conversion));
        self
    }

    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `apiVersion` and `kind` of one object.
    pub fn type_meta(&self) -> TypeMeta {
        TypeMeta::new(self.api_version(), self.kind.clone())
    }

    /// The kind of a list, e.g. `PodList`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// The subresources the endpoints serve for this resource (`finalize`, `status`,
    /// `scale`, `approval`, `ephemeralcontainers`): the only ones a request may name, and what discovery lists.
    pub fn subresources(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.finalize_subresource {
            out.push("finalize");
        }
        if self.status_subresource {
            out.push("status");
        }
        if self.scale.is_some() {
            out.push("scale");
        }
        if self.approval_subresource {
            out.push("approval");
        }
        if self.ephemeral_containers_subresource {
            out.push("ephemeralcontainers");
        }
        out
    }

    /// The verbs a subresource serves, as discovery lists them: `finalize` is PUT only
    /// (upstream's `FinalizeREST` is an updater and nothing else); the others get, patch and
    /// update.
    pub fn subresource_verbs(sub: &str) -> &'static [&'static str] {
        match sub {
            "finalize" => &["update"],
            _ => &["get", "patch", "update"],
        }
    }

    /// `plural` or `plural.group`, as kubectl and errors name the resource.
    pub fn qualified_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

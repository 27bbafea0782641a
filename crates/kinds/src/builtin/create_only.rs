//! The create-only resources and subresources the server routes itself (nothing stored:
//! the review APIs, TokenRequest, Binding), as discovery lists them (upstream lists each
//! with the verb `create` only). The routes live with their handlers in the server; this
//! table is what discovery and clients (kubectl's resource mapping) see of them.
//!
//! Invariant: every entry here has a route in the server that answers a `POST`, and no
//! other verb (the authorization matrix meets each route).

/// One create-only resource (`tokenreviews`) or subresource (`pods/binding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateOnly {
    /// The group of its path (`""` for core).
    pub group: &'static str,
    /// The version of its path.
    pub version: &'static str,
    /// The resource (`tokenreviews`), or `parent/subresource` (`pods/binding`).
    pub resource: &'static str,
    /// Whether it lives in namespaces.
    pub namespaced: bool,
    /// The group of the object it takes (a subresource's may differ from its parent's:
    /// `serviceaccounts/token` takes an `authentication.k8s.io/v1` TokenRequest).
    pub kind_group: &'static str,
    /// The version of that object.
    pub kind_version: &'static str,
    /// Its kind.
    pub kind: &'static str,
}

impl CreateOnly {
    const fn new(
        group: &'static str,
        resource: &'static str,
        namespaced: bool,
        kind: &'static str,
    ) -> Self {
        Self {
            group,
            version: "v1",
            resource,
            namespaced,
            kind_group: group,
            kind_version: "v1",
            kind,
        }
    }

    /// `(parent, subresource)` of a subresource entry.
    pub fn subresource(&self) -> Option<(&'static str, &'static str)> {
        self.resource.split_once('/')
    }
}

/// The review APIs (upstream's authentication and authorization groups), `v1` Binding and
/// `pods/binding`, `pods/eviction` (a `policy/v1` Eviction), and `serviceaccounts/token`.
pub const ALL: &[CreateOnly] = &[
    CreateOnly::new(
        "authentication.k8s.io",
        "selfsubjectreviews",
        false,
        "SelfSubjectReview",
    ),
    CreateOnly::new(
        "authentication.k8s.io",
        "tokenreviews",
        false,
        "TokenReview",
    ),
    CreateOnly::new(
        "authorization.k8s.io",
        "localsubjectaccessreviews",
        true,
        "LocalSubjectAccessReview",
    ),
    CreateOnly::new(
        "authorization.k8s.io",
        "selfsubjectaccessreviews",
        false,
        "SelfSubjectAccessReview",
    ),
    CreateOnly::new(
        "authorization.k8s.io",
        "selfsubjectrulesreviews",
        false,
        "SelfSubjectRulesReview",
    ),
    CreateOnly::new(
        "authorization.k8s.io",
        "subjectaccessreviews",
        false,
        "SubjectAccessReview",
    ),
    CreateOnly::new("", "bindings", true, "Binding"),
    CreateOnly::new("", "pods/binding", true, "Binding"),
    CreateOnly {
        group: "",
        version: "v1",
        resource: "pods/eviction",
        namespaced: true,
        kind_group: "policy",
        kind_version: "v1",
        kind: "Eviction",
    },
    CreateOnly {
        group: "",
        version: "v1",
        resource: "serviceaccounts/token",
        namespaced: true,
        kind_group: "authentication.k8s.io",
        kind_version: "v1",
        kind: "TokenRequest",
    },
];

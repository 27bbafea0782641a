//! [`Store::patch`]: upstream's patch handler's store side (`handlers/patch.go` over the
//! generic store's `Update`): a parsed [`Patch`] — JSON, merge, strategic merge or
//! server-side apply — applied to the stored object in a read-modify-write, through the
//! object, `/status` or `/scale`.
//!
//! Invariants: as every update's ([`crate::store_update`]); a patch is applied to a copy and
//! the copy is discarded on error; an apply of a missing object creates it (checked as a
//! create, authorized for `create`, its namespace checked first); the patched object's
//! unknown fields are settled by field validation (fields the stored object already had are
//! not reported), an apply's undeclared fields are refused whatever the directive; custom
//! resources take no strategic merge (415, as upstream).

use listwatch_storage::Preconditions;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::field_validation::{Directive, Findings};
use crate::patch::{Patch, PatchError, PatchLimits, PatchType};
use crate::store::{Store, StoreError};
use crate::store_update::{Target, apply_scale_update, apply_update, read_modify_write};
use crate::validation::prepare_create_in;
use crate::write::{NoHooks, Subresource, WriteHooks, Written, decoded};

/// Options of [`Store::patch`] (upstream's `metav1.PatchOptions`, with the subresource of
/// the request and the preconditions of its store call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchOptions {
    /// `dryRun=All`: everything but the write.
    pub dry_run: bool,
    /// The manager the patch is recorded under (an apply's owner of the fields it sets;
    /// required for an apply).
    pub field_manager: String,
    /// `force`: an apply takes the fields other managers own instead of conflicting.
    pub force: bool,
    /// `fieldValidation`: what unknown and duplicate fields of the patch do.
    pub field_validation: Directive,
    /// The keys the patch body repeated in one object (the decoder's findings).
    pub duplicate_fields: Vec<String>,
    /// The uid and resourceVersion the stored object must have (a conflict otherwise).
    pub preconditions: Option<Preconditions>,
    /// The part of the object written.
    pub subresource: Subresource,
    /// Bytes the `copy` operations of a JSON patch may copy together (upstream's
    /// `JSONPatchMaxCopyBytes`; the server uses its request body limit).
    pub max_copy_bytes: usize,
}

impl Default for PatchOptions {
    fn default() -> Self {
        Self {
            dry_run: false,
            field_manager: String::new(),
            force: false,
            field_validation: Directive::default(),
            duplicate_fields: Vec::new(),
            preconditions: None,
            subresource: Subresource::Main,
            max_copy_bytes: DEFAULT_MAX_COPY_BYTES,
        }
    }
}

impl PatchOptions {
    /// A patch recorded under `manager`.
    pub fn by(manager: &str) -> Self {
        Self {
            field_manager: manager.to_owned(),
            ..Self::default()
        }
    }
}

/// [`PatchOptions::max_copy_bytes`] by default: upstream's 3 MiB.
pub const DEFAULT_MAX_COPY_BYTES: usize = 3 * 1024 * 1024;

/// Upstream's refusal of an apply without a field manager.
pub fn require_apply_manager(field_manager: &str) -> ApiResult<()> {
    if field_manager.is_empty() {
        return Err(ApiError::bad_request(
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ));
    }
    Ok(())
}

impl Store {
    /// Patches `name` in `namespace` with `patch` (no hooks: see [`Store::patch_with`]).
    pub async fn patch(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
        opts: &PatchOptions,
    ) -> Result<Written, StoreError> {
        self.patch_with(namespace, name, patch, opts, &NoHooks)
            .await
    }

    /// Patches `name` in `namespace` with `patch` through `opts.subresource`, with the
    /// caller's `hooks`, recorded under `opts.field_manager`: an apply through the field
    /// manager (creating a missing object on the object itself), any other patch applied
    /// to the stored object (or its Scale) and settled by field validation. What was
    /// stored, whether it was created and the warnings to answer.
    pub async fn patch_with(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
        opts: &PatchOptions,
        hooks: &dyn WriteHooks,
    ) -> Result<Written, StoreError> {
        let info = self.info();
        let sub = opts.subresource;
        let t = Target {
            store: self,
            namespace: namespace.filter(|_| info.namespaced),
            name,
            sub,
            hooks,
        };
        let applies = matches!(patch, Patch::Apply(_));
        if applies {
            require_apply_manager(&opts.field_manager)?;
        }
        if info.custom_resource && matches!(patch, Patch::Strategic(_)) {
            return Err(ApiError::unsupported_patch_type(PatchType::accepted(true)).into());
        }
        let directive = opts.field_validation;
        let duplicates = opts.duplicate_fields.clone();
        // An apply's unknown fields are refused by its typed conversion whatever the
        // directive (as upstream); its duplicates follow the directive.
        let (apply_findings, patch_duplicates) = if applies {
            (
                Findings::duplicates(duplicates).settle_apply(directive)?,
                Findings::default(),
            )
        } else {
            (Findings::default(), Findings::duplicates(duplicates))
        };
        let patch_findings = std::sync::Mutex::new(Findings::default());
        if let Patch::Apply(config) = patch
            && sub != Subresource::Scale
        {
            crate::typed::check_apply(info, self.catalog(), config)?;
            crate::field_validation::refuse_undeclared(self.kind_schema(), info, config)?;
        }
        let limits = PatchLimits {
            max_copy_bytes: opts.max_copy_bytes,
        };
        let creates = applies && sub == Subresource::Main;
        if creates {
            hooks.check_namespace(t.namespace, name).await?;
        }
        let key = t.key()?;
        let unprocessable = |e: PatchError| StoreError::from(e.to_api_error());
        let fm = self.field_manager(sub);
        let manager = opts.field_manager.as_str();
        let force = opts.force;
        let (object, created) = read_modify_write(
            &t,
            creates,
            opts.dry_run,
            opts.preconditions.as_ref(),
            |cur| match (cur, patch) {
                (None, Patch::Apply(config)) if creates => {
                    // An apply that creates is a create: refused while the kind goes away
                    // (a terminating CRD's resources), as `create_with` refuses it.
                    if info.terminating.is_set() {
                        return Err(crate::store::terminating(info).into());
                    }
                    let mut applied = fm.apply(None, config, manager, force)?;
                    crate::typed::canonicalize(info, self.catalog(), &mut applied);
                    let Value::Object(mut m) = applied else {
                        return Err(ApiError::bad_request("patch must be an object").into());
                    };
                    t.name_mismatch(&m)?;
                    prepare_create_in(info, Some(self.catalog()), &mut m, t.namespace)?;
                    // `patch` was authorized; an apply that creates needs `create` too.
                    hooks.authorize_create()?;
                    let mut v = Value::Object(m);
                    hooks.admit(&mut v, None)?;
                    Ok(self.to_object(v)?)
                }
                (None, _) => Err(key.not_found().into()),
                (Some(cur), _) if sub == Subresource::Scale => {
                    let schema = self.catalog().kind("autoscaling", "v1", "Scale");
                    apply_scale_update(&t, cur, manager, |scale| {
                        patch.apply(scale, schema, limits).map_err(unprocessable)
                    })
                }
                (Some(cur), patch) => {
                    let mut cur_v = decoded(cur)?;
                    match patch {
                        Patch::Apply(config) => {
                            let mut applied = fm.apply(Some(&cur_v), config, manager, force)?;
                            crate::typed::canonicalize(info, self.catalog(), &mut applied);
                            apply_update(&t, &mut cur_v, applied, None)
                        }
                        _ => {
                            let schema = self.kind_schema();
                            let mut patched =
                                patch.apply(&cur_v, schema, limits).map_err(unprocessable)?;
                            crate::typed::check_patched(info, self.catalog(), &patched)?;
                            crate::typed::canonicalize(info, self.catalog(), &mut patched);
                            let shown = (directive == Directive::Strict).then(|| patched.clone());
                            let mut found = patch_duplicates.clone();
                            let plan = self.plan();
                            let plan = plan.as_deref().map(listwatch_schema::Plan::root);
                            let mut unknown = crate::field_validation::prune_kind(
                                self.info(),
                                plan,
                                &mut patched,
                            );
                            if !unknown.is_empty() {
                                // What the stored object already had is dropped, not
                                // reported (as upstream, whose stored objects decode
                                // without them).
                                let prior = crate::field_validation::prune_kind(
                                    self.info(),
                                    plan,
                                    &mut cur_v.clone(),
                                );
                                unknown.retain(|f| !prior.contains(f));
                            }
                            found.extend(unknown);
                            let found = found
                                .settle_patch(directive, shown.as_ref().unwrap_or(&patched))?;
                            if let Ok(mut slot) = patch_findings.lock() {
                                *slot = found;
                            }
                            apply_update(&t, &mut cur_v, patched, Some(manager))
                        }
                    }
                }
            },
        )
        .await?;
        if created && !opts.dry_run {
            hooks.after_create(t.namespace, &key, &object).await?;
        }
        let warnings = if applies {
            apply_findings
        } else {
            patch_findings.into_inner().unwrap_or_default()
        };
        Ok(Written {
            object,
            created,
            warnings,
        })
    }
}

//! Service allocations: cluster IPs from `--service-cluster-ip-range` and node ports from
//! `--service-node-port-range`, as upstream's service REST storage allocates them
//! (pkg/registry/core/service/storage/alloc.go over ipallocator and portallocator), and the
//! defaults that go with them (`clusterIPs`, `ipFamilies`, `ipFamilyPolicy`).
//!
//! [`ServiceAllocator`] is an [`Admission`] hook: a Service create (POST, a PUT or apply that
//! creates) gets a free cluster IP unless it asks for one (honoured when free and in range,
//! else 422 with upstream's message) or is headless (`None`) or `ExternalName`; NodePort and
//! LoadBalancer Services get node ports the same way; an update keeps what the stored object
//! was given (a cluster IP may not change once set) and allocates only what it newly needs;
//! the ports of one port number (TCP and UDP 53) share one node port, as upstream's
//! `initNodePorts`. What an update no longer uses (the kind's strategy drops a cluster IP or
//! node ports the new `type` does not need) is released when the observer sees the update
//! stored, not before: a write that then fails keeps what the stored object holds.
//!
//! Where the allocations live: in memory, rebuilt from the stored Services (an observer —
//! `listwatch-controllers`' `service_ips` — feeds [`ServiceAllocator::observe`] every stored
//! Service and [`ServiceAllocator::forget`] every deleted one), so they survive a restart by
//! being recomputed, as upstream's repair controller recomputes its bitmap. Until that first
//! list is in, Service writes are answered 429 (retry).
//!
//! Invariants:
//! - an address or port is held by at most one owner (a Service's uid) at a time, under one
//!   lock: two concurrent creates never get the same IP;
//! - a dry run reserves nothing;
//! - a POST whose write fails (the name exists, the storage refuses) releases what it
//!   took at once ([`Admission::abandoned`]);
//! - an allocation for a write that never got stored (a failed or retried update, a PUT or
//!   apply that creates and fails) is *pending* until the observer sees it stored (then *confirmed*); pending allocations
//!   older than [`PENDING_GRACE`] are released by [`ServiceAllocator::repair`] (upstream's
//!   repair loop releases leaks the same way);
//! - the range's first address is the `default/kubernetes` Service's: never allocated
//!   dynamically, refused to any other Service.
//!
//! Not done as upstream: dual-stack ranges (one CIDR only); with several servers over one
//! etcd each allocates from its own memory, so two replicas may hand out the same address
//! at the same moment (upstream serialises through an allocation object in etcd).

pub mod range;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::Rng;
use serde_json::{Value, json};

use crate::admission::{Admission, AdmissionRequest, MutationRequest, Operation};
use crate::error::{ApiError, ApiResult, FieldError};
use listwatch_kinds::KindSpec;

pub use range::{Cidr, PortRange, RangeError};

/// How long an allocation may stay unconfirmed by a stored Service before
/// [`ServiceAllocator::repair`] releases it.
pub const PENDING_GRACE: Duration = Duration::from_secs(30);

/// Upstream's default `--service-cluster-ip-range` (kube-apiserver's `DefaultServiceIPCIDR`).
pub const DEFAULT_SERVICE_CIDR: &str = "10.0.0.0/24";

/// Who holds an address or a port.
#[derive(Debug, Clone)]
struct Entry {
    /// The Service's uid.
    owner: String,
    /// Seen in a stored Service.
    confirmed: bool,
    /// When it was allocated.
    since: Instant,
}

/// One allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Slot {
    Ip(u128),
    Port(u16),
}

#[derive(Debug, Default)]
struct State {
    synced: bool,
    ips: BTreeMap<u128, Entry>,
    ports: BTreeMap<u16, Entry>,
    /// Every slot an owner holds.
    owned: HashMap<String, Vec<Slot>>,
}

impl State {
    fn holder(&self, slot: Slot) -> Option<&Entry> {
        match slot {
            Slot::Ip(o) => self.ips.get(&o),
            Slot::Port(p) => self.ports.get(&p),
        }
    }

    fn holder_mut(&mut self, slot: Slot) -> Option<&mut Entry> {
        match slot {
            Slot::Ip(o) => self.ips.get_mut(&o),
            Slot::Port(p) => self.ports.get_mut(&p),
        }
    }

    fn insert(&mut self, slot: Slot, owner: &str, confirmed: bool) {
        let e = Entry {
            owner: owner.to_owned(),
            confirmed,
            since: Instant::now(),
        };
        match slot {
            Slot::Ip(o) => self.ips.insert(o, e),
            Slot::Port(p) => self.ports.insert(p, e),
        };
        self.owned.entry(owner.to_owned()).or_default().push(slot);
    }

    fn remove(&mut self, slot: Slot) {
        let gone = match slot {
            Slot::Ip(o) => self.ips.remove(&o),
            Slot::Port(p) => self.ports.remove(&p),
        };
        if let Some(e) = gone
            && let Some(list) = self.owned.get_mut(&e.owner)
        {
            list.retain(|s| *s != slot);
            if list.is_empty() {
                self.owned.remove(&e.owner);
            }
        }
    }

    /// Takes `slot` for `owner`: `false` when another owner holds it.
    fn claim(&mut self, slot: Slot, owner: &str, dry_run: bool) -> bool {
        match self.holder(slot) {
            Some(e) => e.owner == owner,
            None => {
                if !dry_run {
                    self.insert(slot, owner, false);
                }
                true
            }
        }
    }
}

/// The first key in `[from, to)` that `used` lacks.
fn first_free<K: Ord + Copy, V>(
    used: &BTreeMap<K, V>,
    from: K,
    to: K,
    next: impl Fn(K) -> K,
) -> Option<K> {
    let mut cursor = from;
    for (k, _) in used.range(from..to) {
        if *k != cursor {
            return Some(cursor);
        }
        cursor = next(cursor);
    }
    (cursor < to).then_some(cursor)
}

/// The cluster IP and node port allocator of Services (see the module doc).
#[derive(Debug)]
pub struct ServiceAllocator {
    cidr: Cidr,
    ports: PortRange,
    state: Mutex<State>,
}

/// A Service's type, defaulted.
fn service_type(obj: &Value) -> &str {
    obj.pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
}

/// Whether a Service of this type gets node ports (LoadBalancer unless
/// `allocateLoadBalancerNodePorts: false`).
fn wants_node_ports(obj: &Value) -> bool {
    match service_type(obj) {
        "NodePort" => true,
        "LoadBalancer" => obj
            .pointer("/spec/allocateLoadBalancerNodePorts")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        _ => false,
    }
}

/// The requested cluster IP: `spec.clusterIP`, else `spec.clusterIPs[0]`; empty for none.
fn requested_ip(obj: &Value) -> String {
    let ip = obj
        .pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !ip.is_empty() {
        return ip.to_owned();
    }
    obj.pointer("/spec/clusterIPs/0")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Go's `%#v` of a one-element `[]string`, as upstream shows `spec.clusterIPs`.
fn go_strings(ip: &str) -> String {
    format!("[]string{{{}}}", serde_json::Value::from(ip))
}

impl ServiceAllocator {
    /// An allocator over `cidr` and `ports`, not synced yet.
    pub fn new(cidr: Cidr, ports: PortRange) -> Self {
        Self {
            cidr,
            ports,
            state: Mutex::new(State::default()),
        }
    }

    /// The cluster IP range.
    pub fn cidr(&self) -> &Cidr {
        &self.cidr
    }

    /// The `kubernetes` Service's address: the range's first.
    pub fn kubernetes_ip(&self) -> IpAddr {
        self.cidr.ip(self.cidr.first_usable())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every critical section leaves the maps consistent.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The observer has fed every stored Service: allocation may start.
    pub fn set_synced(&self) {
        self.lock().synced = true;
    }

    /// Whether the stored Services are in.
    pub fn is_synced(&self) -> bool {
        self.lock().synced
    }

    /// What a stored Service holds.
    fn slots_of(&self, obj: &Value) -> Vec<Slot> {
        let mut out = Vec::new();
        if service_type(obj) != "ExternalName"
            && let Ok(ip) = requested_ip(obj).parse::<IpAddr>()
            && let Some(off) = self.cidr.offset(ip)
        {
            out.push(Slot::Ip(off));
        }
        if let Some(ports) = obj.pointer("/spec/ports").and_then(Value::as_array) {
            for p in ports {
                if let Some(n) = p.get("nodePort").and_then(Value::as_u64)
                    && let Ok(n) = u16::try_from(n)
                    && (self.ports.first..=self.ports.last).contains(&n)
                {
                    out.push(Slot::Port(n));
                }
            }
        }
        if let Some(n) = obj
            .pointer("/spec/healthCheckNodePort")
            .and_then(Value::as_u64)
            .and_then(|n| u16::try_from(n).ok())
            .filter(|n| (self.ports.first..=self.ports.last).contains(n))
        {
            out.push(Slot::Port(n));
        }
        out
    }

    /// A stored Service (listed or changed): what it holds is confirmed as its own, what it
    /// held before and no longer does is released.
    pub fn observe(&self, obj: &Value) {
        let uid = meta_str(obj, "uid");
        if uid.is_empty() {
            return;
        }
        let wanted = self.slots_of(obj);
        let mut st = self.lock();
        for slot in &wanted {
            match st.holder_mut(*slot) {
                Some(e) if e.owner == uid => e.confirmed = true,
                Some(_) => {
                    tracing::warn!(service = %format!("{}/{}", meta_str(obj, "namespace"), meta_str(obj, "name")),
                        slot = ?slot, "an allocation of this stored Service is held by another");
                }
                None => st.insert(*slot, uid, true),
            }
        }
        let stale: Vec<Slot> = st
            .owned
            .get(uid)
            .map(|held| {
                held.iter()
                    .copied()
                    .filter(|s| !wanted.contains(s))
                    .filter(|s| st.holder(*s).is_some_and(|e| e.confirmed))
                    .collect()
            })
            .unwrap_or_default();
        for s in stale {
            st.remove(s);
        }
    }

    /// A Service is gone: everything its uid held is released.
    pub fn forget(&self, uid: &str) {
        let mut st = self.lock();
        if let Some(held) = st.owned.get(uid).cloned() {
            for s in held {
                if st.holder(s).is_some_and(|e| e.owner == uid) {
                    st.remove(s);
                }
            }
        }
    }

    /// Releases allocations never seen stored within [`PENDING_GRACE`] (writes that
    /// failed after allocating). Returns how many.
    pub fn repair(&self) -> usize {
        self.repair_older_than(PENDING_GRACE)
    }

    fn repair_older_than(&self, grace: Duration) -> usize {
        let mut st = self.lock();
        let leaked: Vec<Slot> = st
            .ips
            .iter()
            .filter(|(_, e)| !e.confirmed && e.since.elapsed() >= grace)
            .map(|(o, _)| Slot::Ip(*o))
            .chain(
                st.ports
                    .iter()
                    .filter(|(_, e)| !e.confirmed && e.since.elapsed() >= grace)
                    .map(|(p, _)| Slot::Port(*p)),
            )
            .collect();
        for s in &leaked {
            st.remove(*s);
        }
        leaked.len()
    }

    /// How many addresses and ports are held (for tests and metrics).
    pub fn held(&self) -> (usize, usize) {
        let st = self.lock();
        (st.ips.len(), st.ports.len())
    }

    /// A free address, taken for `owner` (not kept on a dry run).
    fn next_ip(st: &mut State, cidr: &Cidr, owner: &str, dry_run: bool) -> Option<u128> {
        let (lo, start_dyn, end) = (cidr.first_usable(), cidr.dynamic_start(), cidr.end());
        // The first usable address is the kubernetes Service's.
        let lo = lo.saturating_add(1);
        let start_dyn = start_dyn.max(lo);
        let pick = if end > start_dyn {
            rand::rng().random_range(start_dyn..end)
        } else {
            lo
        };
        let next = |k: u128| k.saturating_add(1);
        let off = first_free(&st.ips, pick, end, next)
            .or_else(|| first_free(&st.ips, start_dyn, pick, next))
            .or_else(|| first_free(&st.ips, lo, start_dyn, next))?;
        if !dry_run {
            st.insert(Slot::Ip(off), owner, false);
        }
        Some(off)
    }

    /// A free node port, taken for `owner` (not kept on a dry run).
    fn next_port(st: &mut State, ports: PortRange, owner: &str, dry_run: bool) -> Option<u16> {
        let pick = rand::rng().random_range(ports.first..=ports.last);
        let next = |k: u16| k.saturating_add(1);
        let found = first_free(&st.ports, pick, ports.last, next)
            .or_else(|| (!st.ports.contains_key(&ports.last)).then_some(ports.last))
            .or_else(|| first_free(&st.ports, ports.first, pick, next))?;
        if !dry_run {
            st.insert(Slot::Port(found), owner, false);
        }
        Some(found)
    }

    /// Sets the cluster IP fields of `obj` (a non-ExternalName Service), allocating one
    /// when it has none.
    fn assign_ip(
        &self,
        st: &mut State,
        info: &KindSpec,
        obj: &mut Value,
        owner: &str,
        dry_run: bool,
    ) -> ApiResult<()> {
        let name = meta_str(obj, "name").to_owned();
        let namespace = meta_str(obj, "namespace").to_owned();
        let requested = requested_ip(obj);
        let ip = if requested == "None" {
            requested
        } else if requested.is_empty() {
            let off = Self::next_ip(st, &self.cidr, owner, dry_run).ok_or_else(|| {
                ApiError::internal("failed to allocate a serviceIP: range is full")
            })?;
            self.cidr.ip(off).to_string()
        } else {
            let invalid = |detail: String| {
                ApiError::invalid(
                    info,
                    &name,
                    &[FieldError::invalid_raw(
                        "spec.clusterIPs",
                        &go_strings(&requested),
                        detail,
                    )],
                )
            };
            let Ok(parsed) = requested.parse::<IpAddr>() else {
                return Err(ApiError::invalid(
                    info,
                    &name,
                    &[FieldError::invalid(
                        "spec.clusterIPs[0]",
                        &requested,
                        "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                    )],
                ));
            };
            let Some(off) = self.cidr.offset(parsed) else {
                return Err(invalid(format!(
                    "failed to allocate IP {requested}: the provided IP ({requested}) is not in the valid range. The range of valid IPs is {}",
                    self.cidr
                )));
            };
            let reserved = off == self.cidr.first_usable()
                && !(namespace == "default" && name == "kubernetes");
            if reserved || !st.claim(Slot::Ip(off), owner, dry_run) {
                return Err(invalid(format!(
                    "failed to allocate IP {requested}: provided IP is already allocated"
                )));
            }
            parsed.to_string()
        };
        let family = self.cidr.family();
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        spec.insert("clusterIP".into(), json!(ip));
        spec.insert("clusterIPs".into(), json!([ip]));
        if spec
            .get("ipFamilies")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
        {
            spec.insert("ipFamilies".into(), json!([family]));
        }
        if spec
            .get("ipFamilyPolicy")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            spec.insert("ipFamilyPolicy".into(), json!("SingleStack"));
        }
        Ok(())
    }

    /// Gives each port of a NodePort/LoadBalancer Service a node port: the one it asks for
    /// (when free and in range), the stored object's for the same port, or a free one.
    fn assign_node_ports(
        &self,
        st: &mut State,
        info: &KindSpec,
        obj: &mut Value,
        old: Option<&Value>,
        owner: &str,
        dry_run: bool,
    ) -> ApiResult<()> {
        let name = meta_str(obj, "name").to_owned();
        let old_ports: Vec<&Value> = old
            .filter(|o| wants_node_ports(o))
            .and_then(|o| o.pointer("/spec/ports"))
            .and_then(Value::as_array)
            .map(|a| a.iter().collect())
            .unwrap_or_default();
        let Some(ports) = obj.pointer_mut("/spec/ports").and_then(Value::as_array_mut) else {
            return Ok(());
        };
        // The node port given to each port number: the protocols of one port number share
        // it (upstream's `initNodePorts`).
        let mut by_port: Vec<(Value, u16)> = Vec::new();
        let mut unassigned: Vec<usize> = Vec::new();
        for (i, p) in ports.iter_mut().enumerate() {
            let Some(port) = p.as_object_mut() else {
                continue;
            };
            let asked = port.get("nodePort").and_then(Value::as_i64).unwrap_or(0);
            let field = format!("spec.ports[{i}].nodePort");
            if asked != 0 {
                let in_range = u16::try_from(asked)
                    .ok()
                    .filter(|n| (self.ports.first..=self.ports.last).contains(n));
                let Some(n) = in_range else {
                    return Err(ApiError::invalid(
                        info,
                        &name,
                        &[FieldError::invalid_raw(
                            &field,
                            &asked.to_string(),
                            format!(
                                "provided port is not in the valid range. The range of valid ports is {}",
                                self.ports
                            ),
                        )],
                    ));
                };
                if !st.claim(Slot::Port(n), owner, dry_run) {
                    return Err(ApiError::invalid(
                        info,
                        &name,
                        &[FieldError::invalid_raw(
                            &field,
                            &asked.to_string(),
                            "provided port is already allocated",
                        )],
                    ));
                }
                let number = port.get("port").cloned().unwrap_or(Value::Null);
                if !by_port.iter().any(|(k, _)| *k == number) {
                    by_port.push((number, n));
                }
                continue;
            }
            // The stored object's node port for the same port and protocol.
            let same = |o: &&&Value| {
                o.get("port") == port.get("port")
                    && o.get("protocol").and_then(Value::as_str).unwrap_or("TCP")
                        == port
                            .get("protocol")
                            .and_then(Value::as_str)
                            .unwrap_or("TCP")
            };
            let kept = old_ports
                .iter()
                .find(same)
                .and_then(|o| o.get("nodePort"))
                .and_then(Value::as_u64)
                .and_then(|n| u16::try_from(n).ok());
            match kept {
                Some(n) => {
                    port.insert("nodePort".into(), json!(n));
                    let number = port.get("port").cloned().unwrap_or(Value::Null);
                    if !by_port.iter().any(|(k, _)| *k == number) {
                        by_port.push((number, n));
                    }
                }
                None => unassigned.push(i),
            }
        }
        for i in unassigned {
            let Some(port) = ports.get_mut(i).and_then(Value::as_object_mut) else {
                continue;
            };
            let number = port.get("port").cloned().unwrap_or(Value::Null);
            let shared = by_port.iter().find(|(k, _)| *k == number).map(|(_, n)| *n);
            let n = match shared {
                Some(n) => n,
                None => {
                    let n = Self::next_port(st, self.ports, owner, dry_run).ok_or_else(|| {
                        ApiError::internal("failed to allocate a nodePort: range is full")
                    })?;
                    by_port.push((number, n));
                    n
                }
            };
            port.insert("nodePort".into(), json!(n));
        }
        Ok(())
    }

    /// An update keeps what the stored object was allocated (upstream's
    /// `PatchAllocatedValues`) and may not change a cluster IP once set.
    fn carry_over(info: &KindSpec, old: &Value, obj: &mut Value) -> ApiResult<()> {
        if service_type(obj) == "ExternalName" || service_type(old) == "ExternalName" {
            return Ok(());
        }
        let old_ip = requested_ip(old);
        let new_ip = requested_ip(obj);
        if old_ip.is_empty() {
            return Ok(());
        }
        if !new_ip.is_empty() && new_ip != old_ip {
            return Err(ApiError::invalid(
                info,
                meta_str(obj, "name"),
                &[FieldError::invalid(
                    "spec.clusterIPs[0]",
                    &new_ip,
                    "may not change once set",
                )],
            ));
        }
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            let missing = spec.get(field).is_none_or(|v| {
                v.is_null()
                    || v.as_str().is_some_and(str::is_empty)
                    || v.as_array().is_some_and(Vec::is_empty)
            });
            if missing && let Some(v) = old.pointer(&format!("/spec/{field}")) {
                spec.insert(field.into(), v.clone());
            }
        }
        Ok(())
    }
}

/// Whether `info` is core/v1 Services.
fn is_services(info: &KindSpec) -> bool {
    info.group.is_empty() && info.plural == "services"
}

impl Admission for ServiceAllocator {
    fn mutate(&self, request: &MutationRequest<'_>, object: &mut Value) -> ApiResult<()> {
        if !is_services(request.info) {
            return Ok(());
        }
        let info = request.info;
        let old = match request.operation {
            Operation::Update => request.old,
            Operation::Create => None,
        };
        if let Some(old) = old {
            listwatch_kinds::builtin::core::service::apply_defaults(object);
            Self::carry_over(info, old, object)?;
        }
        let owner = match old {
            Some(o) => meta_str(o, "uid"),
            None => meta_str(object, "uid"),
        }
        .to_owned();
        let mut st = self.lock();
        if !st.synced {
            return Err(ApiError::too_many_requests());
        }
        // An update that keeps its address needs nothing more (even when the range changed
        // since it was given).
        // An ExternalName Service holds no address, even one an earlier build left in its
        // spec: leaving ExternalName claims the address afresh (or is refused).
        let keeps_ip = old.is_some_and(|o| {
            let was = requested_ip(o);
            service_type(o) != "ExternalName" && !was.is_empty() && was == requested_ip(object)
        });
        let held_before: Vec<Slot> = st.owned.get(&owner).cloned().unwrap_or_default();
        let mut assign = || -> ApiResult<()> {
            if service_type(object) != "ExternalName" && !keeps_ip {
                self.assign_ip(&mut st, info, object, &owner, request.dry_run)?;
            }
            if wants_node_ports(object) {
                self.assign_node_ports(&mut st, info, object, old, &owner, request.dry_run)?;
            }
            Ok(())
        };
        let result = assign();
        if result.is_err() {
            // A refused request keeps nothing it took on the way (upstream reverts its
            // allocation transaction).
            let taken: Vec<Slot> = st
                .owned
                .get(&owner)
                .map(|now| {
                    now.iter()
                        .copied()
                        .filter(|s| !held_before.contains(s))
                        .collect()
                })
                .unwrap_or_default();
            for s in taken {
                st.remove(s);
            }
        }
        result
    }

    fn validate(&self, _request: &AdmissionRequest<'_>) -> ApiResult<()> {
        Ok(())
    }

    fn abandoned(&self, info: &KindSpec, uid: &str) {
        if is_services(info) {
            self.forget(uid);
        }
    }

    fn deleted(&self, info: &KindSpec, object: &listwatch_api::Object) {
        if is_services(info)
            && let Some(uid) = object.uid()
        {
            self.forget(uid);
        }
    }
}

#[cfg(test)]
mod tests;

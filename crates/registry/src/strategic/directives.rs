//! The directives of a strategic merge patch: `$retainKeys`, `$setElementOrder/<list>`
//! and `$patch` in the items of a merged list (`$patch` on an object and
//! `$deleteFromPrimitiveList` are handled where objects merge, in the parent module).
//!
//! Invariants: a directive is checked as upstream checks it (a malformed one is
//! [`StrategicError::BadFormat`] where upstream answers 400) and removed from the patch
//! once applied, so that no directive is ever stored.

use std::collections::HashSet;

use listwatch_schema::Node;
use serde_json::Value;

use super::list::{
    Scalar, element_kind, merge_key_of, merge_list, normalize_order, partition, scalar_key,
};
use super::{
    BAD_RETAIN_KEYS, BAD_SET_ELEMENT_ORDER, DELETE_FROM_PRIMITIVE_LIST, DIRECTIVE, Obj,
    RETAIN_KEYS, Result, SET_ELEMENT_ORDER, StrategicError, bad_arg_type, list_meta, new_value,
    no_merge_key, show, strip_keys_value, unprocessable,
};

/// `$retainKeys`: clears the fields of `original` it does not list, after checking that
/// every field the patch sets is listed.
pub(super) fn retain_keys(original: &mut Obj, patch: &mut Obj) -> Result<()> {
    let Some(listed) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(listed) = listed else {
        return Err(StrategicError::BadFormat(BAD_RETAIN_KEYS));
    };
    let keep: HashSet<&str> = listed.iter().filter_map(Value::as_str).collect();
    let unlisted = patch.iter().any(|(k, v)| {
        !v.is_null()
            && !k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            && !k.starts_with(SET_ELEMENT_ORDER)
            && !keep.contains(k.as_str())
    });
    if unlisted {
        return Err(StrategicError::BadFormat(BAD_RETAIN_KEYS));
    }
    original.retain(|k, _| keep.contains(k.as_str()));
    Ok(())
}

/// `$setElementOrder/<list>`: merges each such list with the patch's and orders the result
/// as the directive says (upstream's `mergePatchIntoOriginal`). The lists handled are
/// removed from `patch`.
pub(super) fn set_element_orders(
    original: &mut Obj,
    patch: &mut Obj,
    schema: Option<Node<'_>>,
) -> Result<()> {
    let directives: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
        .cloned()
        .collect();
    for directive in directives {
        let Some(order) = patch.remove(&directive) else {
            continue;
        };
        let Value::Array(order) = order else {
            return Err(bad_arg_type("[]interface {}", &order));
        };
        let name = directive
            .strip_prefix(SET_ELEMENT_ORDER)
            .and_then(|rest| rest.strip_prefix('/'))
            .ok_or(StrategicError::BadFormat(BAD_SET_ELEMENT_ORDER))?
            .to_owned();
        let live = match original.get(&name) {
            None => None,
            Some(Value::Array(l)) => Some(l.clone()),
            Some(other) => return Err(bad_arg_type("[]interface {}", other)),
        };
        let patched = match patch.remove(&name) {
            None => None,
            Some(Value::Array(l)) => Some(l),
            Some(other) => return Err(bad_arg_type("[]interface {}", &other)),
        };
        let meta = list_meta(schema, &name);
        check_order(patched.as_deref().unwrap_or(&[]), &order, meta.key)?;
        let live_items = live.clone().unwrap_or_default();
        let kind = element_kind(&[&live_items, patched.as_deref().unwrap_or(&[])]);
        let merged = match (live, patched.clone()) {
            (Some(l), None) => l,
            (None, Some(p)) => p.into_iter().filter_map(new_value).collect(),
            (Some(l), Some(p)) => {
                if meta.merge {
                    merge_list(l, p, &meta, false)?
                } else {
                    p.into_iter().map(strip_keys_value).collect()
                }
            }
            (None, None) => continue,
        };
        // Upstream types the items first (an error when there are none at all).
        kind?;
        let key = meta.key;
        let (in_order, server_only) = partition(merged, &order, key)?;
        let ordered = normalize_order(in_order, server_only, &order, &live_items, key)?;
        original.insert(name, Value::Array(ordered));
    }
    Ok(())
}

/// Upstream's `validatePatchWithSetOrderList`: the patch's items (less deletions and other
/// directives) must appear in the order list, in its order.
fn check_order(patch: &[Value], order: &[Value], key: Option<&str>) -> Result<()> {
    if patch.is_empty() || order.is_empty() {
        return Ok(());
    }
    let mut items = Vec::with_capacity(patch.len());
    for p in patch {
        if key.is_some() {
            let Value::Object(m) = p else {
                return Err(bad_arg_type("map[string]interface {}", p));
            };
            if m.get(DIRECTIVE).and_then(Value::as_str) == Some("delete") {
                continue;
            }
        }
        items.push(p);
    }
    let (mut i, mut j) = (0, 0);
    while i < items.len() && j < order.len() {
        if items[i].get(DIRECTIVE).is_some() {
            i += 1;
            continue;
        }
        let equal = match key {
            None => scalar_key(items[i]) == scalar_key(&order[j]),
            Some(k) => merge_key_of(items[i], k)? == merge_key_of(&order[j], k)?,
        };
        if equal {
            i += 1;
        }
        j += 1;
    }
    if i < items.len() {
        return Err(unprocessable(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER} list:\n{}\n",
            show(&Value::Array(patch.to_vec())),
            show(&Value::Array(order.to_vec()))
        )));
    }
    Ok(())
}

/// Items with `$patch` (upstream's `mergeSliceWithSpecialElements`): `delete` removes every
/// live item with that key, `replace` makes the patch's other items the whole list,
/// `merge` is refused. Returns the live list and the patch's ordinary items.
pub(super) fn special_items(
    live: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut ordinary = Vec::with_capacity(patch.len());
    let mut deleted: HashSet<Scalar<'static>> = HashSet::new();
    let mut replace = false;
    for p in patch {
        let Value::Object(m) = &p else {
            return Err(bad_arg_type("map[string]interface {}", &p));
        };
        match m.get(DIRECTIVE) {
            None => ordinary.push(p),
            Some(d) => match d.as_str() {
                Some("delete") => match m.get(key) {
                    Some(v) => {
                        deleted.insert(scalar_key(v).owned());
                    }
                    None => return Err(no_merge_key(m, key)),
                },
                Some("replace") => replace = true,
                Some("merge") => {
                    return Err(unprocessable(
                        "merging lists cannot yet be specified in the patch",
                    ));
                }
                _ => {
                    return Err(unprocessable(format!(
                        "unknown patch type: {} in map: {}",
                        show(d),
                        show(&p)
                    )));
                }
            },
        }
    }
    if replace {
        let replacement = ordinary.into_iter().map(strip_keys_value).collect();
        return Ok((replacement, Vec::new()));
    }
    let live = if deleted.is_empty() {
        live
    } else {
        live.into_iter()
            .filter(|item| {
                item.get(key)
                    .is_none_or(|v| !deleted.contains(&scalar_key(v).owned()))
            })
            .collect()
    };
    Ok((live, ordinary))
}

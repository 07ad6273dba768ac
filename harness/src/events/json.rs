//! An event as one JSON object, the shape every version of the event log holds: the kind's
//! name (`event`), `t_ns`, `cycle` where the kind has one ([`CycleKey`]), `port` where the
//! event names one, then the kind's own keys (a `ready` or `health` has its `port` last, where
//! it was when the port was their own key). The log's line adds its own envelope keys, `v`
//! and `host`, in front ([`crate::report::jsonl`]).
//!
//! These are the bytes the event log held before the envelope was a type, but for one kind:
//! a `port_perf` wrote its `port` after `phase`, and now writes it after `t_ns`. Reading takes
//! the keys in any order, so lines of either layout read the same.

use super::{CycleKey, Event, EventKind};
use crate::port::PortId;
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

/// An event whose envelope does not fit its kind (a producer's mistake: the log could not
/// read the line back).
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    #[error("a `{0}` event must belong to a cycle")]
    NoCycle(&'static str),
    #[error("a `{0}` event belongs to no cycle")]
    Cycle(&'static str),
    #[error("a `{0}` event must name its port")]
    NoPort(&'static str),
    #[error("{0}")]
    Json(#[from] serde_json::Error),
}

impl Event {
    /// The event as one JSON object (see the module doc for its keys).
    pub fn to_json(&self) -> Result<Vec<u8>, EnvelopeError> {
        let name = self.kind.name();
        match (self.kind.cycle_key(), self.cycle) {
            (CycleKey::Always, None) => return Err(EnvelopeError::NoCycle(name)),
            (CycleKey::Never, Some(_)) => return Err(EnvelopeError::Cycle(name)),
            _ => {}
        }
        if self.kind.needs_port() && self.port.is_none() {
            return Err(EnvelopeError::NoPort(name));
        }
        let body = serde_json::to_vec(&self.kind)?;
        // An internally tagged enum serialises as `{"event":"NAME"` and the kind's keys.
        let tag = format!("{{\"event\":\"{name}\"");
        let Some(rest) = body.strip_prefix(tag.as_bytes()) else {
            return Err(serde_json::Error::custom(format!("a `{name}` event did not serialise with its tag first")).into());
        };
        let mut out = Vec::with_capacity(body.len() + 48);
        out.extend_from_slice(tag.as_bytes());
        out.extend_from_slice(format!(",\"t_ns\":{}", self.t_ns).as_bytes());
        match (self.kind.cycle_key(), self.cycle) {
            (_, Some(c)) => out.extend_from_slice(format!(",\"cycle\":{c}").as_bytes()),
            (CycleKey::Nullable, None) => out.extend_from_slice(b",\"cycle\":null"),
            _ => {}
        }
        let port = match self.port {
            Some(p) => format!(",\"port\":{}", serde_json::to_string(&p)?),
            None => String::new(),
        };
        if self.kind.port_last() {
            // `rest` is the kind's keys and the object's closing brace.
            let (keys, close) = rest.split_at(rest.len().saturating_sub(1));
            out.extend_from_slice(keys);
            out.extend_from_slice(port.as_bytes());
            out.extend_from_slice(close);
        } else {
            out.extend_from_slice(port.as_bytes());
            out.extend_from_slice(rest);
        }
        Ok(out)
    }

    /// Reads an event from a JSON object's keys (any order; see the module doc). The host is
    /// not among them: it is the line's ([`crate::report::jsonl::decode_line`]).
    pub fn from_object(mut keys: Map<String, Value>) -> Result<Event, serde_json::Error> {
        let t_ns: Option<u64> = take(&mut keys, "t_ns")?;
        let has_cycle = keys.contains_key("cycle");
        let cycle: Option<u32> = take(&mut keys, "cycle")?;
        let port: Option<PortId> = take(&mut keys, "port")?;
        let kind: EventKind = serde_json::from_value(Value::Object(keys))?;
        let t_ns = t_ns.ok_or_else(|| serde_json::Error::missing_field("t_ns"))?;
        match kind.cycle_key() {
            CycleKey::Always if cycle.is_none() => return Err(serde_json::Error::missing_field("cycle")),
            CycleKey::Never if has_cycle => return Err(serde_json::Error::unknown_field("cycle", &[])),
            _ => {}
        }
        if kind.needs_port() && port.is_none() {
            return Err(serde_json::Error::missing_field("port"));
        }
        Ok(Event { t_ns, cycle, port, host: None, kind })
    }
}

/// Takes `key` out of `keys`: absent or `null` is `None`.
fn take<T: DeserializeOwned>(keys: &mut Map<String, Value>, key: &'static str) -> Result<Option<T>, serde_json::Error> {
    match keys.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v).map(Some).map_err(|e| serde_json::Error::custom(format!("`{key}`: {e}"))),
    }
}

/// An event reads from any JSON object holding one (a line of the log without its `v` and
/// `host`, as format 1 wrote them).
impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Event::from_object(Map::deserialize(d)?).map_err(D::Error::custom)
    }
}

//! The JSON Schema of scenario files, generated from the types.

use super::Scenario;

/// The JSON Schema of scenario files, generated from these types.
pub fn scenario_schema() -> serde_json::Value {
    let mut v = schemars::schema_for!(Scenario).to_value();
    strip_null(&mut v);
    v
}

/// TOML has no null: an optional key is left out, never null. Removes the `null` alternatives
/// schemars gives `Option` fields, so editors do not offer them.
fn strip_null(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            if let Some(Value::Array(types)) = map.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let only = types.remove(0);
                    map.insert("type".into(), only);
                }
            }
            if let Some(Value::Array(alts)) = map.get_mut("anyOf") {
                alts.retain(|a| !a.get("type").is_some_and(|t| t == "null"));
                if alts.len() == 1 {
                    let Some(Value::Object(only)) = alts.pop() else { unreachable!("one alternative left") };
                    map.remove("anyOf");
                    for (k, val) in only {
                        map.entry(k).or_insert(val);
                    }
                }
            }
            map.values_mut().for_each(strip_null);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_null),
        _ => {}
    }
}

/// [`scenario_schema`] as committed in `scenarios/scenario.schema.json`.
pub fn scenario_schema_text() -> String {
    let mut s = serde_json::to_string_pretty(&scenario_schema()).expect("a JSON value always serialises");
    s.push('\n');
    s
}

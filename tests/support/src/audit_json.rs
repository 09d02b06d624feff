//! Reading `audit -o json`.

/// `(code, name)` of every finding in `audit -o json` output, in order.
pub fn codes_and_names(json: &str) -> Vec<(String, String)> {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["code"].as_str().unwrap().to_string(),
                f["name"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

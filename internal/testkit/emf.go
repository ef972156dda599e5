package testkit

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// ValidateEMF checks one line against the Embedded Metric Format
// specification's rules: a root _aws object with an integer Timestamp (ms)
// and a CloudWatchMetrics array of directives, each with a Namespace, a
// Dimensions array of dimension sets (≤ 30 names, each a root string member)
// and a Metrics array (≤ 100, each with a Name of a root numeric member and a
// valid Unit, if any).
func ValidateEMF(line []byte) error {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	meta, ok := doc["_aws"].(map[string]any)
	if !ok {
		return fmt.Errorf("no _aws object")
	}
	ts, ok := meta["Timestamp"].(json.Number)
	if _, err := ts.Int64(); !ok || err != nil {
		return fmt.Errorf("Timestamp %v is not an integer", meta["Timestamp"])
	}
	directives, ok := meta["CloudWatchMetrics"].([]any)
	if !ok || len(directives) == 0 {
		return fmt.Errorf("CloudWatchMetrics missing or empty")
	}
	units := map[string]bool{"Seconds": true, "Microseconds": true, "Milliseconds": true, "Bytes": true, "Count": true, "Percent": true, "None": true}
	for _, d := range directives {
		dir := d.(map[string]any)
		if ns, _ := dir["Namespace"].(string); ns == "" || len(ns) > 1024 {
			return fmt.Errorf("Namespace %v", dir["Namespace"])
		}
		sets, ok := dir["Dimensions"].([]any)
		if !ok {
			return fmt.Errorf("Dimensions missing")
		}
		for _, set := range sets {
			names := set.([]any)
			if len(names) > 30 {
				return fmt.Errorf("dimension set of %d", len(names))
			}
			for _, n := range names {
				if _, ok := doc[n.(string)].(string); !ok {
					return fmt.Errorf("dimension %v is not a root string member", n)
				}
			}
		}
		metrics, ok := dir["Metrics"].([]any)
		if !ok || len(metrics) == 0 || len(metrics) > 100 {
			return fmt.Errorf("Metrics: %v", dir["Metrics"])
		}
		for _, m := range metrics {
			def := m.(map[string]any)
			name, _ := def["Name"].(string)
			if name == "" || len(name) > 1024 {
				return fmt.Errorf("metric Name %v", def["Name"])
			}
			if _, ok := doc[name].(json.Number); !ok {
				return fmt.Errorf("metric %s has no numeric root member", name)
			}
			if u, ok := def["Unit"]; ok && !units[u.(string)] {
				return fmt.Errorf("unit %v", u)
			}
		}
	}
	return nil
}

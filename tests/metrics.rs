//! The `metrics` feature publishes the stats as gauges and counters.
#![cfg(feature = "metrics")]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use approx_kv_index::ApproxKvIndexer;
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder, SharedString,
    Unit,
};

/// Records the last value set on each metric, by name.
#[derive(Default, Clone)]
struct Capture(Arc<Mutex<HashMap<String, f64>>>);

struct Cell(String, Capture);

impl GaugeFn for Cell {
    fn increment(&self, v: f64) {
        *self.1 .0.lock().unwrap().entry(self.0.clone()).or_default() += v;
    }
    fn decrement(&self, v: f64) {
        *self.1 .0.lock().unwrap().entry(self.0.clone()).or_default() -= v;
    }
    fn set(&self, v: f64) {
        self.1 .0.lock().unwrap().insert(self.0.clone(), v);
    }
}

impl CounterFn for Cell {
    fn increment(&self, v: u64) {
        *self.1 .0.lock().unwrap().entry(self.0.clone()).or_default() += v as f64;
    }
    fn absolute(&self, v: u64) {
        self.1 .0.lock().unwrap().insert(self.0.clone(), v as f64);
    }
}

impl Recorder for Capture {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(Arc::new(Cell(key.name().to_string(), self.clone())))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(Arc::new(Cell(key.name().to_string(), self.clone())))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

#[test]
fn publish_metrics_reports_the_stats() {
    let index = ApproxKvIndexer::new(2, Duration::from_secs(60)).unwrap();
    index.process_routing_decision_for_request(&[1, 2, 3, 4], 1);
    index.find_matches_for_request(&[1, 2]);
    let capture = Capture::default();
    metrics::with_local_recorder(&capture, || index.publish_metrics());
    let seen = capture.0.lock().unwrap().clone();
    assert_eq!(seen["approx_kv_index_entries"], 2.0);
    assert_eq!(seen["approx_kv_index_nodes"], 2.0);
    assert_eq!(seen["approx_kv_index_workers"], 1.0);
    assert_eq!(seen["approx_kv_index_records_total"], 1.0);
    assert_eq!(seen["approx_kv_index_finds_total"], 1.0);
    assert!(seen["approx_kv_index_estimated_bytes"] > 0.0);
    assert_eq!(seen["approx_kv_index_finds_gallop"], 1.0);
}

#[test]
fn publish_metrics_reports_cached_token_reports_per_worker() {
    let index = ApproxKvIndexer::new(2, Duration::from_secs(60)).unwrap();
    index.process_routing_decision_for_request(&[1, 2, 3, 4], 1);
    let request = index.begin_request(1, &[1, 2, 3, 4, 5, 6]);
    assert!(index.observe_cached(&request, 2));
    let capture = Capture::default();
    metrics::with_local_recorder(&capture, || index.publish_metrics());
    let seen = capture.0.lock().unwrap().clone();
    assert_eq!(seen["approx_kv_index_cache_reports_total"], 1.0);
    assert_eq!(seen["approx_kv_index_predicted_blocks_total"], 2.0);
    assert_eq!(seen["approx_kv_index_delivered_blocks_total"], 1.0);
    assert_eq!(seen["approx_kv_index_worker_predicted_blocks_total"], 2.0);
    assert_eq!(seen["approx_kv_index_worker_delivered_blocks_total"], 1.0);
    assert_eq!(seen["approx_kv_index_dropped_by_reports_total"], 0.0);
}

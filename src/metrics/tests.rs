//! The metrics' unit tests.

use super::*;

#[test]
fn request_durations_render_as_a_cumulative_histogram() {
    let series = Durations::request("durations \"test\"", "GET");
    for micros in [50, 300, 2_000, 400_000_000] {
        series.record(Duration::from_micros(micros));
    }
    let mut out = String::new();
    series.render(&mut out);
    let count = |le: &str| -> String {
        let prefix = format!(
            "holdfast_request_duration_seconds_bucket{{holdfast_namespace=\"durations \\\"test\\\"\",command=\"GET\",le=\"{le}\"}} "
        );
        let line = out.lines().find(|l| l.starts_with(&prefix));
        line.unwrap_or_else(|| panic!("no bucket {le} in\n{out}"))[prefix.len()..].to_string()
    };
    assert_eq!(count("0.0001"), "1");
    assert_eq!(count("0.00025"), "1");
    assert_eq!(count("0.0005"), "2");
    assert_eq!(count("0.0025"), "3");
    assert_eq!(count("120"), "3");
    assert_eq!(count("+Inf"), "4");
    assert!(
        out.contains("_count{holdfast_namespace=\"durations \\\"test\\\"\",command=\"GET\"} 4\n"),
        "{out}"
    );
    assert!(
        out.contains(
            "_sum{holdfast_namespace=\"durations \\\"test\\\"\",command=\"GET\"} 400.00235\n"
        ),
        "{out}"
    );
}

#[test]
fn the_catalogue_is_well_formed() {
    let mut names = std::collections::HashSet::new();
    for def in CATALOGUE {
        assert!(names.insert(def.name), "{} twice", def.name);
        assert!(def.name.starts_with("holdfast_"), "{}", def.name);
        match def.kind {
            SeriesKind::Counter => assert!(def.name.ends_with("_total"), "{}", def.name),
            // A histogram's name ends with its unit: seconds, or requests (group sizes).
            SeriesKind::Histogram => assert!(
                def.name.ends_with("_seconds") || def.name.ends_with("_requests"),
                "{}",
                def.name
            ),
            SeriesKind::Gauge => assert!(!def.name.ends_with("_total"), "{}", def.name),
        }
        assert!(!def.help.is_empty());
    }
}

//! Fixed expectations taken from a Redis 7.0.15 server.

use super::*;

fn score(lon: f64, lat: f64) -> f64 {
    match encode(lon, lat) {
        Ok(s) => s,
        Err(e) => panic!("encode({lon}, {lat}) failed: {e}"),
    }
}

#[test]
fn palermo_and_catania() {
    let p = score(13.361389, 38.115556);
    let c = score(15.087269, 37.502669);
    assert_eq!(p, 3479099956230698.0);
    let (plon, plat) = decode(p);
    assert_eq!(format_coordinate(plon), "13.36138933897018433");
    assert_eq!(format_coordinate(plat), "38.11555639549629859");
    let (clon, clat) = decode(c);
    assert_eq!(format_coordinate(clon), "15.08726745843887329");
    assert_eq!(format_coordinate(clat), "37.50266842333162032");
    assert_eq!(hash_string(p), "sqc8b49rny0");
    assert_eq!(hash_string(c), "sqdtr74hyu0");
    let d = distance(plon, plat, clon, clat);
    assert_eq!(format_distance(d, 1.0), "166274.1516");
    assert_eq!(format_distance(d, 1000.0), "166.2742");
    assert_eq!(format_distance(0.0, 1.0), "0.0000");
}

#[test]
fn limits_and_errors() {
    assert_eq!(
        encode(200.0, 100.0),
        Err("ERR invalid longitude,latitude pair 200.000000,100.000000".to_string())
    );
    assert_eq!(score(180.0, 0.0), 10133099161583616.0);
    assert_eq!(score(-180.0, 85.05112878), 4503599627370496.0);
    assert_eq!(score(180.0, -85.05112878), 9007199254740992.0);
    let (lon, lat) = decode(10133099161583616.0);
    assert_eq!(format_coordinate(lon), "180");
    assert_eq!(format_coordinate(lat), "0.00000126736058093");
    assert_eq!(hash_string(10133099161583616.0), "80000000000");
    assert_eq!(hash_string(9007199254740992.0), "00bh0hbj200");
}

#[test]
fn units() {
    assert_eq!(unit(b"KM"), Some(1000.0));
    assert_eq!(unit(b"Mi"), Some(1609.34));
    assert_eq!(unit(b"ft\0junk"), Some(0.3048));
    assert_eq!(unit(b"mm"), None);
    assert_eq!(unit(b""), None);
}

#[test]
fn coordinate_text() {
    assert_eq!(format_coordinate(-0.0), "0");
    assert_eq!(format_coordinate(-1e-30), "0");
    assert_eq!(format_coordinate(12.5), "12.5");
    assert_eq!(format_coordinate(-180.0), "-180");
    // An exact tie at the 18th decimal rounds to even, as glibc does.
    assert_eq!(
        format_coordinate(13.0 + 2f64.powi(-18)),
        "13.00000381469726562"
    );
}

#[test]
fn fixed_point_text() {
    assert_eq!(format_distance(0.00004, 1.0), "0.0000");
    // 0.00005 * 10^4 is exactly 0.5 in doubles; llrint rounds it to even.
    assert_eq!(format_distance(0.00005, 1.0), "0.0000");
    assert_eq!(format_distance(2.5, 10000.0), "0.0002");
    // 12.34565 * 10^4 is 123456.4999... in doubles.
    assert_eq!(format_distance(12.34565, 1.0), "12.3456");
    assert_eq!(format_distance(f64::NAN, 1.0), "-922337203685477.5808");
}

#[test]
fn partial_sort_matches_full_sort_on_distinct_keys() {
    let mut seed = 0x1234_5678_u64;
    for n in 1..200usize {
        let mut v: Vec<(u64, usize)> = (0..n)
            .map(|i| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed % 1000, i)
            })
            .collect();
        let mut full = v.clone();
        full.sort_by_key(|a| a.0);
        for count in [1u64, 2, 5, 7, 41, 100] {
            let mut w = v.clone();
            let k = arrange(&mut w, |x| x.0 as f64, Sort::Asc, count);
            let got: Vec<u64> = w[..k].iter().map(|x| x.0).collect();
            let want: Vec<u64> = full[..k].iter().map(|x| x.0).collect();
            assert_eq!(got, want, "n={n} count={count}");
        }
        let k = arrange(&mut v, |x| x.0 as f64, Sort::Asc, 0);
        assert_eq!(&v[..k], &full[..]);
    }
}

#[test]
fn ranges_of_a_city_search() {
    let r = search_ranges(15.0, 37.0, &Shape::Radius(200_000.0));
    assert!(!r.is_empty() && r.len() <= 9);
    for (lo, hi) in &r {
        assert!(lo < hi);
    }
}

#[test]
fn ranges_are_distinct_and_well_formed() {
    let mut seed = 0x9E37_79B9_u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 11) as f64 / (1u64 << 53) as f64
    };
    for _ in 0..20_000 {
        let lon = rnd() * 360.0 - 180.0;
        let lat = rnd() * 170.1 - 85.05;
        let size = (rnd() * 40.0).exp2() * 1e-4;
        let shape = if rnd() < 0.5 {
            Shape::Radius(size)
        } else {
            Shape::Box {
                width: size,
                height: size * rnd(),
            }
        };
        let r = search_ranges(lon, lat, &shape);
        assert!(!r.is_empty() && r.len() <= 9);
        for (i, a) in r.iter().enumerate() {
            assert!(a.0 < a.1 && a.1 <= 4503599627370496.0);
            assert!(r[..i].iter().all(|b| b != a), "repeated range {a:?}");
        }
    }
    assert!(search_ranges(200.0, 0.0, &Shape::Radius(1.0)).is_empty());
}

/// The reply encoder's human doubles (the command table's `human_doubles`, which GEO replies
/// use) spell every coordinate as Redis's human long double does.
#[test]
fn the_encoders_human_doubles_spell_coordinates_as_redis() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..100_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let score = (x >> 12) as f64;
        let (lon, lat) = decode(score);
        for v in [lon, lat] {
            assert_eq!(
                crate::resp::format_double(v, crate::resp::DoubleStyle::Human),
                format_coordinate(v),
                "{v}"
            );
        }
    }
}

//! Redis 7.0.15 GEO arithmetic, reproduced bit for bit for the SQL backends.
//!
//! Redis keeps GEO points in an ordinary sorted set whose score is a 52-bit
//! geohash: 26 longitude bits (odd positions) interleaved with 26 latitude
//! bits (even positions) over -180..180 and -85.05112878..85.05112878. This
//! module holds everything a backend needs besides the sorted set itself:
//!
//! * [`encode`] / [`decode`]: GEOADD's score and GEOPOS's cell centre;
//! * [`hash_string`]: GEOHASH's text; [`distance`]: GEODIST's metres;
//! * [`search_ranges_in_unit`] + [`within_in_unit`]: the score ranges a
//!   GEOSEARCH / GEORADIUS* must scan and the per-point filter;
//! * [`arrange`]: the order of the matches (ASC/DESC, COUNT);
//! * [`format_distance`], [`format_coordinate`], [`score_to_integer`],
//!   [`unit`]: the reply text and the unit table.
//!
//! Everything is plain double arithmetic in the same order as the C code;
//! `sin`, `cos`, `asin` and `sqrt` come from the platform libm, the same
//! glibc the Redis binary links against. No I/O happens here.
//!
//! What the caller still owns: argument parsing (Redis parses numbers with
//! its own strtod-based parser and options with strcasecmp), the sorted-set
//! scans (`min <= score < max`, in score-then-member order), and the
//! command-level rules such as "COUNT without ANY and without ASC/DESC
//! means ASC".

// Comparisons are spelt as in the C code on purpose: with a NaN operand the
// range-`contains` forms answer differently.
#![allow(clippy::manual_range_contains, clippy::neg_cmp_op_on_partial_ord)]

mod area;
mod cast;
mod cell;
mod order;
mod reply;

#[cfg(test)]
mod tests;

pub use order::Sort;
#[cfg(test)]
pub use reply::format_coordinate;
pub use reply::{check_lon_lat, format_distance, unit};

/// A search area; sizes in metres (or in the unit given to the `_in_unit`
/// functions).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shape {
    /// BYRADIUS / GEORADIUS*: the radius.
    Radius(f64),
    /// BYBOX: full width (east-west) and height (north-south).
    Box { width: f64, height: f64 },
}

/// GEOADD's encoding: the score for (lon, lat), or the error text Redis
/// answers (e.g. "ERR invalid longitude,latitude pair 200.000000,100.000000").
pub fn encode(lon: f64, lat: f64) -> Result<f64, String> {
    check_lon_lat(lon, lat)?;
    match cell::encode(lon, lat, cell::STEP_MAX) {
        // Redis writes the bits as a decimal integer and ZADD parses it back
        // into a double: correctly rounded, as this conversion is. Scores
        // reach 2^53 only for lon = 180, where the rounding does matter.
        Some(c) => Ok(c.aligned() as f64),
        // Unreachable after check_lon_lat; reported like the range error.
        None => Err(format!(
            "ERR invalid longitude,latitude pair {lon:.6},{lat:.6}"
        )),
    }
}

/// GEOPOS: the (lon, lat) a score decodes to (the centre of its cell, as
/// Redis computes it, clamped to the accepted limits). Any score decodes;
/// non-integral, negative or huge ones go through the same C conversion to
/// an unsigned 64-bit integer that Redis applies.
pub fn decode(score: f64) -> (f64, f64) {
    cell::decode_score(score)
}

/// GEOHASH's 11-character string for a score (Redis re-encodes with the
/// standard -180..180 / -90..90 ranges; the 11th character is always '0').
pub fn hash_string(score: f64) -> String {
    reply::hash_string(score)
}

/// Distance in metres between two points, as Redis's geohashGetDistance
/// computes it (GEODIST passes the first member's point first).
pub fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    area::distance(lon1, lat1, lon2, lat2)
}

/// The score ranges [min, max) that a search around (lon, lat) must scan,
/// in Redis's order: the centre cell, then N, S, E, W, NE, NW, SE, SW, minus
/// the neighbours Redis drops as outside the bounding box, and minus any
/// cell equal to the previously scanned one (at step 1 the grid is 2x2 and
/// N = S, E = W, NE = NW = SE = SW). Redis only compares with the previous
/// scanned cell, and never skips a copy of the centre cell; both rules are
/// kept, although with the grid's geometry no cell ever repeats in the list.
/// Sizes in metres. An invalid centre (see [`check_lon_lat`]) gives no ranges.
///
/// A backend scans each range in order (`min <= score < max`, score then
/// member order), keeps the members `within` accepts, and with COUNT ..
/// ANY stops as soon as COUNT members are kept.
#[cfg(test)]
pub fn search_ranges(lon: f64, lat: f64, shape: &Shape) -> Vec<(f64, f64)> {
    search_ranges_in_unit(lon, lat, shape, 1.0)
}

/// `search_ranges` with the shape in a unit (`conversion` = [`unit`]'s
/// factor). Redis applies the factor late, so for BYBOX the step estimate
/// can differ in the last bit from the metres version; use this one when
/// the request named a unit other than metres.
pub fn search_ranges_in_unit(
    lon: f64,
    lat: f64,
    shape: &Shape,
    conversion: f64,
) -> Vec<(f64, f64)> {
    area::ranges(&area::Query {
        lon,
        lat,
        shape: *shape,
        conversion,
    })
}

/// `within` with the shape in a unit (`conversion` = [`unit`]'s factor).
pub fn within_in_unit(
    lon: f64,
    lat: f64,
    shape: &Shape,
    conversion: f64,
    score: f64,
) -> Option<f64> {
    area::within(
        &area::Query {
            lon,
            lat,
            shape: *shape,
            conversion,
        },
        score,
    )
}

/// WITHHASH's integer: the score converted as C's `(long long)` does.
pub fn score_to_integer(score: f64) -> i64 {
    cast::c_double_to_i64(score)
}

/// One search match.
#[derive(Clone, Debug, PartialEq)]
pub struct Match<M> {
    pub member: M,
    /// The stored score (WITHHASH prints [`score_to_integer`] of it).
    pub score: f64,
    /// Distance from the centre in metres (divide by the unit for replies).
    pub dist: f64,
    /// The decoded point (WITHCOORD).
    pub lon: f64,
    pub lat: f64,
}

/// Arrange matches (in scan order) as Redis does before replying: a stable
/// sort when every match is returned, Redis's partial quicksort when COUNT
/// cuts the list. `sort` must already include Redis's defaulting (COUNT
/// without ANY and without ASC/DESC sorts ascending). Returns how many
/// leading items form the reply.
pub fn arrange<T: Clone>(
    items: &mut [T],
    dist: impl Fn(&T) -> f64,
    sort: Sort,
    count: u64,
) -> usize {
    order::arrange(items, dist, sort, count)
}

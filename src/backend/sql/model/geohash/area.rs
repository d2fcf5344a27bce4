//! Search areas: distances, the bounding box of a shape, the choice of grid
//! step, the nine cells to scan, and the final in-shape test.

use super::cell::{self, Bounds, Cell, Neighbours, STEP_MAX};
use super::Shape;

/// Degrees to radians factor, `M_PI / 180.0` evaluated in double.
const D_R: f64 = std::f64::consts::PI / 180.0;
/// The Earth radius Redis uses for every distance.
const EARTH_RADIUS_IN_METERS: f64 = 6372797.560856;
/// Half the Mercator world width; the step estimate starts from it.
const MERCATOR_MAX: f64 = 20037726.37;

fn deg_rad(deg: f64) -> f64 {
    deg * D_R
}

fn rad_deg(rad: f64) -> f64 {
    rad / D_R
}

/// geohashGetLatDistance: distance along a meridian.
pub fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS_IN_METERS * (deg_rad(lat2) - deg_rad(lat1)).abs()
}

/// geohashGetDistance: haversine with a shortcut for equal longitudes.
pub fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let lon1r = deg_rad(lon1);
    let lon2r = deg_rad(lon2);
    let v = ((lon2r - lon1r) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let lat1r = deg_rad(lat1);
    let lat2r = deg_rad(lat2);
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS_IN_METERS * a.sqrt().asin()
}

/// geohashEstimateStepsByRadius: bits per axis so one cell spans the range.
fn estimate_step(range_meters: f64, lat: f64) -> u8 {
    if range_meters == 0.0 {
        return STEP_MAX;
    }
    let mut range = range_meters;
    let mut step: i32 = 1;
    // Redis loops while the range is below the limit; a negative range would
    // never get there (Redis rejects negative radii before this point), so
    // the loop is bounded here: 1100 doublings take any positive double past it.
    while range < MERCATOR_MAX && step < 1100 {
        range *= 2.0;
        step += 1;
    }
    step -= 2;
    if lat > 66.0 || lat < -66.0 {
        step -= 1;
        if lat > 80.0 || lat < -80.0 {
            step -= 1;
        }
    }
    // The clamp makes the narrowing conversion lossless.
    step.clamp(1, i32::from(STEP_MAX)) as u8
}

/// A shape in the caller's unit plus the factor converting it to metres,
/// as Redis keeps it (the factor is applied at each use).
#[derive(Clone, Copy, Debug)]
pub struct Query {
    pub lon: f64,
    pub lat: f64,
    pub shape: Shape,
    pub conversion: f64,
}

/// Bounding box of the search (lon_min, lat_min, lon_max, lat_max).
struct Box4 {
    lon_min: f64,
    lat_min: f64,
    lon_max: f64,
    lat_max: f64,
}

/// geohashBoundingBox.
fn bounding_box(q: &Query) -> Box4 {
    let (half_h, half_w) = match q.shape {
        Shape::Radius(r) => (r, r),
        Shape::Box { width, height } => (height / 2.0, width / 2.0),
    };
    let height = q.conversion * half_h;
    let width = q.conversion * half_w;
    let lat_delta = rad_deg(height / EARTH_RADIUS_IN_METERS);
    let lon_delta_top = rad_deg(width / EARTH_RADIUS_IN_METERS / deg_rad(q.lat + lat_delta).cos());
    let lon_delta_bottom =
        rad_deg(width / EARTH_RADIUS_IN_METERS / deg_rad(q.lat - lat_delta).cos());
    // Towards a pole the box is widest on the side nearer the pole.
    let southern = q.lat < 0.0;
    let lon_delta = if southern {
        lon_delta_bottom
    } else {
        lon_delta_top
    };
    Box4 {
        lon_min: q.lon - lon_delta,
        lat_min: q.lat - lat_delta,
        lon_max: q.lon + lon_delta,
        lat_max: q.lat + lat_delta,
    }
}

/// The radius used for the step estimate: the radius itself, or the
/// centre-to-corner distance of a box.
fn step_radius(q: &Query) -> f64 {
    let r = match q.shape {
        Shape::Radius(r) => r,
        Shape::Box { width, height } => {
            ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt()
        }
    };
    r * q.conversion
}

/// The centre cell, its bounds and its neighbours at `step`.
fn cells_at(q: &Query, step: u8) -> Option<(Cell, Bounds, Neighbours)> {
    let centre = cell::encode(q.lon, q.lat, step)?;
    Some((centre, cell::bounds(centre), cell::neighbours(centre)))
}

/// Whether a neighbour at this step fails to reach past the bounding box,
/// in which case Redis retries one step coarser.
fn too_fine(n: &Neighbours, bb: &Box4) -> bool {
    cell::bounds(n.north).lat.max < bb.lat_max
        || cell::bounds(n.south).lat.min > bb.lat_min
        || cell::bounds(n.east).lon.max < bb.lon_max
        || cell::bounds(n.west).lon.min > bb.lon_min
}

/// geohashCalculateAreasByShapeWGS84: the centre cell and the neighbours
/// left after dropping the ones outside the bounding box.
fn areas(q: &Query) -> Option<(Cell, Neighbours)> {
    let bb = bounding_box(q);
    let mut step = estimate_step(step_radius(q), q.lat);
    let (mut centre, mut area, mut n) = cells_at(q, step)?;
    if step > 1 && too_fine(&n, &bb) {
        step -= 1;
        (centre, area, n) = cells_at(q, step)?;
    }
    if step >= 2 {
        if area.lat.min < bb.lat_min {
            n.south = Cell::NONE;
            n.south_west = Cell::NONE;
            n.south_east = Cell::NONE;
        }
        if area.lat.max > bb.lat_max {
            n.north = Cell::NONE;
            n.north_east = Cell::NONE;
            n.north_west = Cell::NONE;
        }
        if area.lon.min < bb.lon_min {
            n.west = Cell::NONE;
            n.south_west = Cell::NONE;
            n.north_west = Cell::NONE;
        }
        if area.lon.max > bb.lon_max {
            n.east = Cell::NONE;
            n.south_east = Cell::NONE;
            n.north_east = Cell::NONE;
        }
    }
    Some((centre, n))
}

/// membersOfAllNeighbors' walk over the nine cells, as score ranges.
pub fn ranges(q: &Query) -> Vec<(f64, f64)> {
    let Some((centre, n)) = areas(q) else {
        // Only an invalid centre gets here; Redis validates it beforehand.
        return Vec::new();
    };
    let order = [
        centre,
        n.north,
        n.south,
        n.east,
        n.west,
        n.north_east,
        n.north_west,
        n.south_east,
        n.south_west,
    ];
    let mut out = Vec::with_capacity(9);
    // Index of the last cell scanned; 0 doubles as "none yet", so a cell
    // equal to the centre cell is scanned again, exactly as in Redis.
    let mut last = 0usize;
    for (i, c) in order.iter().enumerate() {
        if c.is_none() || (last != 0 && *c == order[last]) {
            continue;
        }
        let next = Cell {
            bits: c.bits.wrapping_add(1),
            step: c.step,
        };
        // Aligned values are below 2^53, so the conversions are exact.
        out.push((c.aligned() as f64, next.aligned() as f64));
        last = i;
    }
    out
}

/// geoWithinShape: Some(distance in metres) when the point stored under
/// `score` lies in the shape.
pub fn within(q: &Query, score: f64) -> Option<f64> {
    let (lon, lat) = cell::decode_score(score);
    match q.shape {
        Shape::Radius(r) => {
            let d = distance(q.lon, q.lat, lon, lat);
            // Written as "not greater" so a NaN distance is kept, as in Redis.
            if d > r * q.conversion {
                None
            } else {
                Some(d)
            }
        }
        Shape::Box { width, height } => {
            let width_m = width * q.conversion;
            let height_m = height * q.conversion;
            if lat_distance(lat, q.lat) > height_m / 2.0 {
                return None;
            }
            if distance(lon, lat, q.lon, lat) > width_m / 2.0 {
                return None;
            }
            Some(distance(q.lon, q.lat, lon, lat))
        }
    }
}

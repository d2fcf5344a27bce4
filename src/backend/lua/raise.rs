//! How holdfast's own Lua functions raise an error a script sees as Redis's would: an error
//! table's text carried through mlua's callback errors, found again by the handler that
//! says where in the script it was raised, and by `pcall`.

/// The error `redis.call` raises: an error table's text, raised from holdfast's own function
/// so the script's frame stays on the stack (the handler then says where it was raised).
#[derive(Debug)]
pub(super) struct Raised(pub(super) Vec<u8>);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

impl std::error::Error for Raised {}

/// The text `redis.call` raised, through the callback errors mlua wraps it in.
pub(super) fn raised(e: &mlua::Error) -> Option<&[u8]> {
    match e {
        mlua::Error::ExternalError(inner) => inner.downcast_ref::<Raised>().map(|r| r.0.as_slice()),
        mlua::Error::CallbackError { cause, .. } => raised(cause),
        mlua::Error::WithContext { cause, .. } => raised(cause),
        _ => None,
    }
}

/// The plain string a library function raised (`libs::Thrown`), through the same wrappers.
pub(super) fn thrown(e: &mlua::Error) -> Option<&str> {
    match e {
        mlua::Error::ExternalError(inner) => inner
            .downcast_ref::<super::libs::Thrown>()
            .map(|t| t.0.as_str()),
        mlua::Error::CallbackError { cause, .. } => thrown(cause),
        mlua::Error::WithContext { cause, .. } => thrown(cause),
        _ => None,
    }
}

/// Raises `text` as the script's error (an error table's text: `ERR ...`).
pub(super) fn raise<T>(text: impl Into<Vec<u8>>) -> mlua::Result<T> {
    Err(mlua::Error::external(Raised(text.into())))
}

pub(super) fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

//! The body formats of OTLP over HTTP, and the one Content-Type parser every part of the
//! receiving side uses (media type compared without case, parameters ignored).

/// A body format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `application/x-protobuf`.
    Protobuf,
    /// `application/json`.
    Json,
}

impl Format {
    /// Parses a Content-Type value (parameters such as `charset` are ignored).
    pub fn from_content_type(value: &str) -> Option<Format> {
        let media = value.split(';').next().unwrap_or("").trim();
        if media.eq_ignore_ascii_case("application/x-protobuf") || media.eq_ignore_ascii_case("application/protobuf") {
            Some(Format::Protobuf)
        } else if media.eq_ignore_ascii_case("application/json") {
            Some(Format::Json)
        } else {
            None
        }
    }

    /// The format for error bodies: the request's, or JSON (readable) when it is unknown.
    pub fn for_errors(content_type: Option<&str>) -> Format {
        content_type.and_then(Format::from_content_type).unwrap_or(Format::Json)
    }

    /// The Content-Type to answer with.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Protobuf => "application/x-protobuf",
            Format::Json => "application/json",
        }
    }
}

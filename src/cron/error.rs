//! Why a cron expression or its time zone was refused: [`CronError`], naming the field.

use std::error::Error;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

/// One field of a cron expression, in the order they are written.
///
/// Five fields are `minute hour day-of-month month day-of-week`; six put `second` first; seven
/// add `year` last.
///
/// # Examples
///
/// ```
/// use wheelpool::cron::{Cron, CronField};
///
/// let err = Cron::parse("0 25 * * *", "UTC").unwrap_err();
/// assert_eq!(err.field(), Some(CronField::Hour));
/// assert_eq!(CronField::Hour.to_string(), "hour");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CronField {
    /// Seconds, 0-59 (only in six- and seven-field expressions).
    Second,
    /// Minutes, 0-59.
    Minute,
    /// Hours, 0-23.
    Hour,
    /// Day of the month, 1-31, with `L` (last day) and `W` (nearest weekday).
    DayOfMonth,
    /// Month, 1-12 or `JAN`-`DEC`.
    Month,
    /// Day of the week, 0-7 (0 and 7 are Sunday) or `SUN`-`SAT`, with `#` (nth) and `L`.
    DayOfWeek,
    /// Year (only in seven-field expressions).
    Year,
}

impl CronField {
    /// The fields of an expression with `count` fields, in order (`None`: not 5, 6 or 7).
    pub(crate) fn layout(count: usize) -> Option<&'static [CronField]> {
        use CronField::*;
        const ALL: [CronField; 7] = [Second, Minute, Hour, DayOfMonth, Month, DayOfWeek, Year];
        match count {
            5 => Some(&ALL[1..6]),
            6 => Some(&ALL[..6]),
            7 => Some(&ALL),
            _ => None,
        }
    }

    /// Where this field sits in a full seven-field expression (0-based).
    pub(crate) fn full_index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for CronField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CronField::Second => "second",
            CronField::Minute => "minute",
            CronField::Hour => "hour",
            CronField::DayOfMonth => "day-of-month",
            CronField::Month => "month",
            CronField::DayOfWeek => "day-of-week",
            CronField::Year => "year",
        })
    }
}

/// What was wrong.
#[derive(Debug, Clone)]
enum Kind {
    /// Not 5, 6 or 7 fields (or empty).
    FieldCount(usize),
    /// One field is out of range or malformed.
    Field {
        field: CronField,
        /// 1-based, among the fields as written.
        position: usize,
        /// Byte range of the field in the expression.
        span: Range<usize>,
        text: String,
    },
    /// The expression as a whole (a nickname such as `@daily` gone wrong, or a combination).
    Expression,
    /// The time zone is not in the time zone database.
    Zone(String),
}

/// Why [`Cron::parse`](super::Cron::parse) refused an expression or its time zone.
///
/// It names the bad field and where it is ([`field`](Self::field),
/// [`position`](Self::position), [`span`](Self::span)); the parser's own explanation travels
/// as [`source`](Error::source).
///
/// # Examples
///
/// ```
/// use wheelpool::cron::{Cron, CronField};
///
/// let err = Cron::parse("0 9 * * MON-FRX", "Europe/Berlin").unwrap_err();
/// assert_eq!(err.field(), Some(CronField::DayOfWeek));
/// assert_eq!(err.position(), Some(5));
/// assert_eq!(err.span(), Some(8..15));
/// assert!(err.to_string().starts_with("invalid day-of-week field \"MON-FRX\""));
///
/// let err = Cron::parse("0 9 * * *", "Europe/Berlinn").unwrap_err();
/// assert!(err.is_unknown_zone());
/// assert_eq!(err.field(), None);
/// ```
#[derive(Debug, Clone)]
pub struct CronError {
    kind: Kind,
    source: Option<Arc<dyn Error + Send + Sync>>,
}

impl CronError {
    pub(crate) fn field_count(count: usize) -> Self {
        CronError {
            kind: Kind::FieldCount(count),
            source: None,
        }
    }

    pub(crate) fn bad_field(
        field: CronField,
        position: usize,
        span: Range<usize>,
        text: &str,
        source: impl Error + Send + Sync + 'static,
    ) -> Self {
        CronError {
            kind: Kind::Field {
                field,
                position,
                span,
                text: text.to_owned(),
            },
            source: Some(Arc::new(source)),
        }
    }

    pub(crate) fn expression(source: impl Error + Send + Sync + 'static) -> Self {
        CronError {
            kind: Kind::Expression,
            source: Some(Arc::new(source)),
        }
    }

    pub(crate) fn unknown_zone(name: &str, source: impl Error + Send + Sync + 'static) -> Self {
        CronError {
            kind: Kind::Zone(name.to_owned()),
            source: Some(Arc::new(source)),
        }
    }

    /// The field that is wrong, if one field is (`None` for a wrong field count, an unknown
    /// zone, or an expression wrong as a whole).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::cron::{Cron, CronField};
    ///
    /// let err = Cron::parse("*/5 0 32 * *", "UTC").unwrap_err();
    /// assert_eq!(err.field(), Some(CronField::DayOfMonth));
    /// ```
    pub fn field(&self) -> Option<CronField> {
        match &self.kind {
            Kind::Field { field, .. } => Some(*field),
            _ => None,
        }
    }

    /// The wrong field's place among the fields as written, counting from 1.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::cron::{Cron, CronField};
    ///
    /// // Six fields: seconds come first, so the minute is the second field.
    /// let err = Cron::parse("0 60 * * * *", "UTC").unwrap_err();
    /// assert_eq!((err.field(), err.position()), (Some(CronField::Minute), Some(2)));
    /// ```
    pub fn position(&self) -> Option<usize> {
        match &self.kind {
            Kind::Field { position, .. } => Some(*position),
            _ => None,
        }
    }

    /// The wrong field's byte range in the expression as given.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::cron::Cron;
    ///
    /// let expr = "0  0 * 13 *";
    /// let err = Cron::parse(expr, "UTC").unwrap_err();
    /// assert_eq!(&expr[err.span().unwrap()], "13");
    /// ```
    pub fn span(&self) -> Option<Range<usize>> {
        match &self.kind {
            Kind::Field { span, .. } => Some(span.clone()),
            _ => None,
        }
    }

    /// True if the expression does not have 5, 6 or 7 fields.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::cron::Cron;
    ///
    /// assert!(Cron::parse("* * *", "UTC").unwrap_err().is_field_count());
    /// ```
    pub fn is_field_count(&self) -> bool {
        matches!(self.kind, Kind::FieldCount(_))
    }

    /// True if the time zone is not in the time zone database.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::cron::Cron;
    ///
    /// assert!(Cron::parse("0 3 * * *", "Mars/Olympus_Mons").unwrap_err().is_unknown_zone());
    /// ```
    pub fn is_unknown_zone(&self) -> bool {
        matches!(self.kind, Kind::Zone(_))
    }
}

impl fmt::Display for CronError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::FieldCount(n) => write!(f, "a cron expression has 5, 6 or 7 fields, not {n}"),
            Kind::Field {
                field,
                position,
                span,
                text,
            } => write!(
                f,
                "invalid {field} field {text:?} (field {position}, at byte {})",
                span.start
            ),
            Kind::Expression => f.write_str("invalid cron expression"),
            Kind::Zone(name) => write!(f, "unknown time zone {name:?}"),
        }
    }
}

impl Error for CronError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}

//! Request values read as the OpenAPI document declares them, where serde's defaults
//! read them otherwise:
//!
//! - Whole numbers as JSON Schema counts them: `8641.0` is the integer 8641 (an `integer`
//!   is any number with a zero fractional part), so a request body may carry one in
//!   either form. serde's integer types refuse the second; these read both, and refuse a
//!   fraction or a number out of range with a clear message.
//! - Objects as objects only: serde reads a struct from a JSON array of its fields too
//!   (`[null, null]` as a filter), which the document does not allow.

use serde::de::{DeserializeOwned, Deserializer, Error};
use serde::Deserialize;
use serde_json::{Map, Value};

/// `T` from a JSON object, and from nothing else.
fn from_object<T: DeserializeOwned, E: Error>(map: Map<String, Value>) -> Result<T, E> {
    T::deserialize(Value::Object(map)).map_err(E::custom)
}

/// A struct field that must be an object (a bulk action's `filter`).
pub fn object<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    deserializer: D,
) -> Result<T, D::Error> {
    from_object(Map::deserialize(deserializer)?)
}

/// An optional struct field that must be an object or null (`filter`).
pub fn option_object<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    Option::<Map<String, Value>>::deserialize(deserializer)?
        .map(from_object)
        .transpose()
}

/// An optional list whose items must be objects (a replay's `events`).
pub fn option_objects<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    deserializer: D,
) -> Result<Option<Vec<T>>, D::Error> {
    Option::<Vec<Map<String, Value>>>::deserialize(deserializer)?
        .map(|items| items.into_iter().map(from_object).collect())
        .transpose()
}

/// `number` as a whole number of type `T`, if it is one and fits.
fn whole<T: TryFrom<i64>>(number: &serde_json::Number) -> Option<T> {
    let exact = number.as_i64().or_else(|| {
        let float = number.as_f64()?;
        // Every f64 in this range converts exactly; past it, `as` would saturate.
        let in_range = (-9.223_372_036_854_775e18..9.223_372_036_854_775e18).contains(&float);
        (float.fract() == 0.0 && in_range).then_some(float as i64)
    })?;
    T::try_from(exact).ok()
}

fn read<'de, D: Deserializer<'de>, T: TryFrom<i64>>(
    number: serde_json::Number,
    what: &str,
) -> Result<T, D::Error> {
    whole(&number).ok_or_else(|| D::Error::custom(format!("{number} is not {what}")))
}

/// An optional page cursor (`cursor`, a page's `next_cursor`): 1 to 19 digits, a `-`
/// before them allowed, as the document's pattern says. A value past an id's range is
/// no error: it is the range's end (nothing lies beyond it).
pub fn cursor<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    let Some(text) = Option::<String>::deserialize(deserializer)? else {
        return Ok(None);
    };
    let digits = text.strip_prefix('-').unwrap_or(&text);
    if digits.is_empty() || digits.len() > 19 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(D::Error::custom(format!(
            "cursor is 1 to 19 digits, a - before them allowed, not {text:?}"
        )));
    }
    let wide: i128 = text.parse().map_err(D::Error::custom)?;
    let clamped = wide.clamp(i128::from(i64::MIN), i128::from(i64::MAX));
    Ok(Some(i64::try_from(clamped).unwrap_or_default()))
}

/// An optional `u32` (`limit`).
pub fn option_u32<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u32>, D::Error> {
    Option::<serde_json::Number>::deserialize(deserializer)?
        .map(|number| read::<D, u32>(number, "a whole number from 0 to 4294967295"))
        .transpose()
}

/// An `i64` (`expect.upper_id`).
pub fn i64_value<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    read::<D, i64>(
        serde_json::Number::deserialize(deserializer)?,
        "a whole number that fits 64 bits",
    )
}

/// An optional list of `i64` (`ids`).
pub fn option_i64s<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<i64>>, D::Error> {
    Option::<Vec<serde_json::Number>>::deserialize(deserializer)?
        .map(|numbers| {
            (numbers.into_iter())
                .map(|number| read::<D, i64>(number, "a whole number that fits 64 bits"))
                .collect()
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Body {
        #[serde(default, deserialize_with = "super::option_u32")]
        limit: Option<u32>,
        #[serde(default, deserialize_with = "super::option_i64s")]
        ids: Option<Vec<i64>>,
    }

    #[derive(Deserialize)]
    struct Page {
        #[serde(default, deserialize_with = "super::cursor")]
        cursor: Option<i64>,
    }

    fn page(cursor: &str) -> Result<Option<i64>, serde_json::Error> {
        serde_json::from_value::<Page>(serde_json::json!({ "cursor": cursor })).map(|p| p.cursor)
    }

    #[test]
    fn a_cursor_is_digits_and_past_the_range_is_its_end() {
        assert_eq!(page("42").unwrap(), Some(42));
        assert_eq!(page("-212").unwrap(), Some(-212));
        assert_eq!(page("9999999999999999999").unwrap(), Some(i64::MAX));
        assert_eq!(page("-9999999999999999999").unwrap(), Some(i64::MIN));
        for refused in ["", "-", "1.0", "0x10", "12345678901234567890", " 1", "+1"] {
            assert!(page(refused).is_err(), "{refused:?}");
        }
    }

    fn parse(json: &str) -> Result<Body, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn a_whole_number_is_read_in_either_form() {
        let body = parse(r#"{"limit": 8641.0, "ids": [1, -2.0, 17179869184, 4.6e13]}"#).unwrap();
        assert_eq!(body.limit, Some(8641));
        assert_eq!(
            body.ids,
            Some(vec![1, -2, 17_179_869_184, 46_000_000_000_000])
        );
        let absent = parse("{}").unwrap();
        assert_eq!((absent.limit, absent.ids), (None, None));
    }

    #[test]
    fn a_fraction_or_a_number_out_of_range_is_refused() {
        for json in [
            r#"{"limit": 1.5}"#,
            r#"{"limit": -1}"#,
            r#"{"limit": 4294967296}"#,
            r#"{"ids": [1e19]}"#,
            r#"{"ids": [0.5]}"#,
            r#"{"limit": "7"}"#,
        ] {
            let error = parse(json)
                .err()
                .unwrap_or_else(|| panic!("{json} accepted"));
            assert!(!error.to_string().is_empty());
        }
    }
}

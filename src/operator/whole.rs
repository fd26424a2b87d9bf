//! Whole numbers as JSON Schema counts them: `8641.0` is the integer 8641 (an `integer`
//! is any number with a zero fractional part), so a request body may carry one in either
//! form. serde's integer types refuse the second; these read both, and refuse a fraction
//! or a number out of range with a clear message.

use serde::de::{Deserializer, Error};
use serde::Deserialize;

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

/// An optional `u32` (`limit`).
pub fn option_u32<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u32>, D::Error> {
    Option::<serde_json::Number>::deserialize(deserializer)?
        .map(|number| read::<D, u32>(number, "a whole number from 0 to 4294967295"))
        .transpose()
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

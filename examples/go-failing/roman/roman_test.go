package roman

import "testing"

func TestToRomanBasics(t *testing.T) {
	for n, want := range map[int]string{1: "I", 3: "III", 5: "V", 10: "X", 2026: "MMXXVI"} {
		if got := ToRoman(n); got != want {
			t.Errorf("ToRoman(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestToRomanNine(t *testing.T) {
	if got := ToRoman(9); got != "IX" {
		t.Errorf("ToRoman(9) = %q, want IX", got)
	}
}

func TestToRomanFour(t *testing.T) {
	if got := ToRoman(4); got != "IV" {
		t.Errorf("ToRoman(4) = %q, want IV", got)
	}
}

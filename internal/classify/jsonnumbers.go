package classify

import (
	"math"
	"strconv"
)

// scanNumber validates the number literal at b[i] and returns the index after
// it: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, within float64 range.
func scanNumber(b []byte, i int) (int, error) {
	start := i
	if b[i] == '-' {
		i++
		if i < len(b) && b[i] == 'I' {
			return i, syntaxError(start, "NaN and Infinity are not JSON numbers")
		}
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return i, syntaxError(i, "invalid number")
	}
	intDigits, exponent := i-start, false
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return j, syntaxError(j, "invalid number: digits expected after '.'")
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		exponent = true
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return j, syntaxError(j, "invalid number: digits expected in the exponent")
		}
		i = j
	}
	if i-start > maxNumberLen {
		return i, syntaxError(start, "number literal longer than "+strconv.Itoa(maxNumberLen)+" characters")
	}
	if exponent || i-start > intDigits && intDigits > 300 {
		// Python reads a float that overflows as inf; Go refuses it. Only
		// an exponent or a long integer part can overflow, so plain
		// numbers such as 0.7 skip the parse and its allocation.
		f, err := strconv.ParseFloat(string(b[start:i]), 64)
		if err != nil && math.IsInf(f, 0) {
			return i, syntaxError(start, "number out of the float64 range")
		}
	}
	return i, nil
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

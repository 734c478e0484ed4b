package rollout

import (
	"slices"
	"strings"
	"testing"
)

func TestParseStepsReadsCumulativeSharesWithOrWithoutPercentSigns(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"10%,50%,100%", []int{10, 50, 100}},
		{"10,50,100", []int{10, 50, 100}},
		{" 1% , 10%,100 ", []int{1, 10, 100}},
		{"100%", []int{100}},
		{"100", []int{100}},
	} {
		got, err := ParseSteps(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseSteps(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, err := ParseSteps(FormatSteps(got)); err != nil || !slices.Equal(back, tc.want) {
			t.Errorf("FormatSteps(%v) = %q does not read back: %v, %v", got, FormatSteps(got), back, err)
		}
	}
}

// Each refusal names the part at fault, so that a long --steps is fixed at a glance.
func TestParseStepsRefusesWhatCannotEndWithEveryNodeNamingThePart(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "no steps given"},
		{"  ", "no steps given"},
		{"10%,,100%", "step 2 is empty"},
		{"10%,", "step 2 is empty"},
		{"ten,100", `step "ten" is not a whole percentage`},
		{"10%%,100", `step "10%%" is not a whole percentage`},
		{"1.5%,100", `step "1.5%" is not a whole percentage`},
		{"0%,100%", `step "0%" is outside 1%..100%`},
		{"-5,100", `step "-5" is outside`},
		{"50%,150%", `step "150%" is outside`},
		{"50%,50%,100%", `step "50%" is not larger than the one before (50%)`},
		{"50%,10%,100%", `step "10%" is not larger than the one before (50%)`},
		{"10%,50%", "the last step is 50%; it must be 100%"},
	} {
		_, err := ParseSteps(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSteps(%q) = %v; want an error containing %q", tc.in, err, tc.want)
		}
	}
}

package otlptest

import (
	"strconv"
	"strings"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
)

// valueText is an attribute value as text: arrays as [a b c].
func valueText(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_ArrayValue:
		parts := make([]string, 0, len(x.ArrayValue.Values))
		for _, e := range x.ArrayValue.Values {
			parts = append(parts, valueText(e))
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return ""
}

// Attr is a key's value among kvs as text ("" when absent): for a span
// event's attributes.
func Attr(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.Key == key {
			return valueText(kv.Value)
		}
	}
	return ""
}
